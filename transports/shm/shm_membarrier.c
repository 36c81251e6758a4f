/* shm_membarrier.c: membarrier(2) for the doorbell handshake; see shm_membarrier.h. */
#include "transports/shm/shm_membarrier.h"

#include <stdatomic.h>
#include <sys/types.h>
#include <unistd.h>
#if defined(__linux__) && __has_include(<linux/membarrier.h>)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#define WEFT_HAVE_MEMBARRIER 1
#endif

/* The process that registered, and the result: a forked child is a new process for the
 * kernel (its registration is not assumed), so it registers again. Registering is
 * idempotent, so two threads racing here both register and store the same result. */
static _Atomic pid_t registered_pid;
static _Atomic int registered;

#ifdef WEFT_HAVE_MEMBARRIER
static long membarrier(int cmd) {
  return syscall(__NR_membarrier, cmd, 0, 0);
}

static int register_process(void) {
  long cmds = membarrier(MEMBARRIER_CMD_QUERY);
  long wanted = MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED;
  if (cmds < 0 || (cmds & wanted) != wanted) return 0;
  return membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
}

int weft__shm_membarrier(void) {
  return membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0 ? 0 : -1;
}
#else
static int register_process(void) {
  return 0;
}

int weft__shm_membarrier(void) {
  return -1;
}
#endif

int weft__shm_membarrier_register(void) {
  pid_t me = getpid();
  if (atomic_load(&registered_pid) == me) return atomic_load(&registered);
  atomic_store(&registered, register_process());
  atomic_store(&registered_pid, me);
  return atomic_load(&registered);
}

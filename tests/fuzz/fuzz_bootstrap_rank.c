/* fuzz_bootstrap_rank.c: what a rank reads from the bootstrap root (lib/bootstrap.c):
 * all-gather results, refusals and failure notices, in the order the root may send them.
 *
 * Byte 0 sets the job (nranks 1..4, this rank's all-gather size 0..15 bytes); the rest is
 * the root's byte stream, written into a socketpair whose root end then stops sending. The
 * rank polls for failures (weft__bootstrap_check_failure), then runs up to MAX_CALLS
 * all-gathers, each reading one reply, and polls again.
 * Properties: a successful all-gather was answered with exactly nranks * size bytes; once
 * a failure is reported it stays reported (bootstrap.h). */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/bootstrap.h"
#include "lib/bootstrap_wire.h"
#include "lib/comm.h"
#include "tests/fuzz/fuzz.h"

#define MAX_CALLS 4

/* A rank allocates the length a header claims (up to WEFT__BS_MAX_PAYLOAD, 64 MiB) before
 * reading the payload; under ASan each such allocation costs about a millisecond, and the
 * fuzzer, which learns the 64 MiB bound from the comparison, tried it so often that it ran
 * at 800 inputs/s. Streams with a claim between SKIP_CLAIMS_ABOVE and the bound are skipped:
 * they take the same path (allocate, then find the stream short) as smaller claims. */
#define SKIP_CLAIMS_ABOVE (1u << 20)

/* Walks the stream as the rank reads it: every message is read whole, header then payload. */
static int has_costly_claim(const uint8_t *p, size_t len) {
  size_t off = 0;
  while (off + sizeof(weft__bs_header) <= len) {
    weft__bs_header h;
    memcpy(&h, p + off, sizeof h);
    if (h.len > WEFT__BS_MAX_PAYLOAD) return 0; /* refused unread: the stream ends there */
    if (h.len > SKIP_CLAIMS_ABOVE) return 1;
    off += sizeof h + h.len;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_setup_once();
  if (size < 1 || has_costly_claim(data + 1, size - 1)) return 0;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  fcntl(sv[1], F_SETFL, O_NONBLOCK);
  const uint8_t *p = data + 1;
  size_t len = size - 1;
  while (len > 0) {
    ssize_t n = write(sv[1], p, len);
    if (n <= 0) break; /* larger than the socket buffer: cut */
    p += n;
    len -= (size_t)n;
  }
  /* The root stops sending but still reads (the rank's own messages go there). */
  shutdown(sv[1], SHUT_WR);

  struct weft_comm *comm = calloc(1, sizeof(*comm));
  FUZZ_CHECK(comm != NULL, "calloc");
  pthread_mutex_init(&comm->err_lock, NULL);
  comm->nranks = 1 + (data[0] & 3);
  comm->rank = comm->nranks - 1;
  comm->timeout_ms = 1000;
  comm->bootstrap_fd = sv[0];
  comm->bootstrap_failed_rank = -2;
  size_t bytes = (data[0] >> 2) & 15;
  uint8_t mine[16], all[4 * 16];
  memset(mine, 0xA5, sizeof mine);

  int failed;
  const char *why;
  weft_status_t st = weft__bootstrap_check_failure(comm, &failed, &why);
  int reported = st != WEFT_SUCCESS;
  for (int call = 0; call < MAX_CALLS; call++) {
    memset(all, 0x5A, sizeof all);
    st = weft__bootstrap_allgather(comm, mine, bytes, all);
    if (reported) FUZZ_CHECK(st != WEFT_SUCCESS, "a reported failure stays reported");
    if (st != WEFT_SUCCESS) break;
    FUZZ_CHECK(all[bytes * (size_t)comm->nranks] == 0x5A || bytes * (size_t)comm->nranks == sizeof all,
               "the all-gather wrote no more than nranks * bytes");
  }
  st = weft__bootstrap_check_failure(comm, &failed, &why);
  if (st != WEFT_SUCCESS) {
    FUZZ_CHECK(why != NULL, "a failure has a text");
    (void)strlen(why);
  }
  reported = st != WEFT_SUCCESS;
  if (reported) FUZZ_CHECK(weft__bootstrap_check_failure(comm, &failed, &why) != WEFT_SUCCESS, "stays reported");
  if (comm->bootstrap_fd >= 0) close(comm->bootstrap_fd);
  close(sv[1]);
  pthread_mutex_destroy(&comm->err_lock);
  free(comm);
  return 0;
}

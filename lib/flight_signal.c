/* flight_signal.c: SIGUSR1 writes every listed communicator's flight recorder (flight.h).
 *
 * A signal handler may only call async-signal-safe functions, and the recorder must be
 * read under its communicator's lock, so the handler only writes one byte into a pipe
 * (write(2) is async-signal-safe; errno is kept). A thread of ours, started with the first
 * listed communicator and with every signal blocked, reads the pipe and asks each
 * communicator for its dump (weft__flight_request: served at once when no operation runs,
 * else by the thread running one, within milliseconds). The handler is installed only when
 * WEFT_FLIGHT_RECORDER_DIR is set, and keeps a handler the application installed first. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include "lib/comm.h"
#include "lib/env.h"
#include "lib/flight.h"
#include "lib/log.h"

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct weft_comm *list_head;
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
static int wake_fd[2] = {-1, -1};

static void on_sigusr1(int sig) {
  (void)sig;
  int saved = errno;
  char one = 1;
  ssize_t k = write(wake_fd[1], &one, 1); /* full pipe: a wake-up is already pending */
  (void)k;
  errno = saved;
}

static void *dump_thread(void *arg) {
  (void)arg;
  for (;;) {
    char buf[64];
    ssize_t k = read(wake_fd[0], buf, sizeof(buf));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return NULL;
    pthread_mutex_lock(&list_lock);
    for (struct weft_comm *c = list_head; c != NULL; c = c->flight.next)
      weft__flight_request(c, NULL, 0, NULL, 1, "SIGUSR1", 2000);
    pthread_mutex_unlock(&list_lock);
  }
}

static void setup(void) {
  struct sigaction old;
  if (sigaction(SIGUSR1, NULL, &old) == 0 && old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) {
    WEFT_WARN("flight recorder: SIGUSR1 already has a handler; dumps on SIGUSR1 are off");
    return;
  }
  if (pipe2(wake_fd, O_CLOEXEC) != 0) {
    WEFT_WARN("flight recorder: pipe: %s; dumps on SIGUSR1 are off", strerror(errno));
    return;
  }
  fcntl(wake_fd[1], F_SETFL, O_NONBLOCK);
  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &saved); /* the thread inherits: no signal lands on it */
  pthread_t th;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&th, &attr, dump_thread, NULL);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &saved, NULL);
  if (rc != 0) {
    WEFT_WARN("flight recorder: cannot start its thread: %s; dumps on SIGUSR1 are off", strerror(rc));
    return;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_sigusr1;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
}

void weft__flight_list(struct weft_comm *comm) {
  if (comm->flight.ring == NULL || weft__env_str("WEFT_FLIGHT_RECORDER_DIR", NULL) == NULL) return;
  pthread_once(&setup_once, setup);
  pthread_mutex_lock(&list_lock);
  comm->flight.next = list_head;
  list_head = comm;
  comm->flight.listed = 1;
  pthread_mutex_unlock(&list_lock);
}

void weft__flight_unlist(struct weft_comm *comm) {
  if (!comm->flight.listed) return;
  pthread_mutex_lock(&list_lock);
  for (struct weft_comm **p = &list_head; *p != NULL; p = &(*p)->flight.next)
    if (*p == comm) {
      *p = comm->flight.next;
      break;
    }
  comm->flight.listed = 0;
  pthread_mutex_unlock(&list_lock);
}

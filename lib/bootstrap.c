/* bootstrap.c: a rank's side of the bootstrap (see bootstrap.h): join, all-gather, barrier,
 * failure notices, goodbye. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "lib/bootstrap.h"
#include "lib/bootstrap_wire.h"
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/log.h"
#include "lib/status.h"

/* Reads one message; *payload is malloc'd (NUL-terminated). 0, or -1 with errno
 * (ECONNRESET: the root closed; ETIMEDOUT). */
static int recv_msg(int fd, weft__bs_header *h, char **payload, uint64_t deadline_ns) {
  *payload = NULL;
  if (weft__sock_recv_all(fd, h, sizeof(*h), deadline_ns) != 0) return -1;
  if (h->len > WEFT__BS_MAX_PAYLOAD) {
    errno = EPROTO;
    return -1;
  }
  *payload = malloc(h->len + 1);
  if (*payload == NULL) return -1;
  if (h->len > 0 && weft__sock_recv_all(fd, *payload, h->len, deadline_ns) != 0) {
    free(*payload);
    *payload = NULL;
    return -1;
  }
  (*payload)[h->len] = '\0';
  return 0;
}

/* Reads the next message, passing over HOST_LEFT notices (recorded on comm), which may come
 * at any time after the hosting rank said goodbye. As recv_msg. */
static int recv_next(struct weft_comm *comm, int fd, weft__bs_header *h, char **payload, uint64_t deadline_ns) {
  for (;;) {
    if (recv_msg(fd, h, payload, deadline_ns) != 0) return -1;
    if (h->type != WEFT__BS_HOST_LEFT) return 0;
    comm->root_host_rank = -1;
    free(*payload);
  }
}

/* Records a FAILED notice (or the root's disappearance, failed = -1). */
static weft_status_t note_failure(struct weft_comm *comm, int failed, const char *text) {
  if (comm->bootstrap_failed_rank == -2) {
    comm->bootstrap_failed_rank = failed;
    snprintf(comm->bootstrap_failed_text, sizeof(comm->bootstrap_failed_text), "%s", text);
  }
  return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: %s", comm->rank, comm->bootstrap_failed_text);
}

static weft_status_t io_error(struct weft_comm *comm, const char *what) {
  if (errno == ETIMEDOUT)
    return weft__error(comm, WEFT_ERR_TIMEOUT,
                       "rank %d: bootstrap %s: no answer from the root within %d ms", comm->rank,
                       what, comm->timeout_ms);
  return note_failure(comm, -1, "the bootstrap root (in the process that created the unique id) "
                                "closed the connection: that process exited or failed");
}

/* Handles a message that is not the one we wait for: REJECT or FAILED. */
static weft_status_t unexpected(struct weft_comm *comm, const weft__bs_header *h, const char *p,
                                const char *what) {
  if (h->type == WEFT__BS_FAILED && h->len >= 4) {
    int32_t failed;
    memcpy(&failed, p, 4);
    return note_failure(comm, failed, p + 4);
  }
  if (h->type == WEFT__BS_REJECT && h->len >= 4) {
    int32_t st;
    memcpy(&st, p, 4);
    return weft__error(comm, (weft_status_t)st, "rank %d: bootstrap %s: the root refused: %s",
                       comm->rank, what, p + 4);
  }
  return weft__error(comm, WEFT_ERR_INTERNAL, "rank %d: bootstrap %s: unexpected message type %u",
                     comm->rank, what, h->type);
}

weft_status_t weft__bootstrap_join(struct weft_comm *comm, const weft__id_layout *id) {
  weft__sockaddr root;
  weft__id_get_root(id, &root);
  char where[80];
  weft__sockaddr_str(&root, where, sizeof(where));
  uint64_t deadline = weft__deadline_after_ms(comm->timeout_ms);
  int fd = weft__sock_connect(&root, deadline);
  if (fd < 0)
    return weft__error(comm, errno == ETIMEDOUT ? WEFT_ERR_TIMEOUT : WEFT_ERR_SYSTEM,
                       "rank %d: cannot reach the bootstrap root at %s within %d ms: %s%s",
                       comm->rank, where, comm->timeout_ms, strerror(errno),
                       errno == ETIMEDOUT ? " (nothing accepted there: is the process that hosts the root "
                                            "- rank 0, or whoever made the unique id - running, and are "
                                            "MASTER_ADDR/MASTER_PORT or WEFT_ROOT_ADDR right?)" : "");
  comm->bootstrap_fd = fd;
  weft__bs_hello hello = {WEFT__ID_MAGIC, {0}, comm->rank, comm->nranks, comm->timeout_ms, (int32_t)getpid()};
  memcpy(hello.secret, id->secret, 16);
  weft__bs_header h = {WEFT__BS_HELLO, sizeof(hello)};
  if (weft__sock_send_all(fd, &h, sizeof(h), deadline) != 0 ||
      weft__sock_send_all(fd, &hello, sizeof(hello), deadline) != 0)
    return io_error(comm, "join");
  /* The root reports a join timeout (with the missing ranks) at our deadline; wait a little
   * longer than that so its message, not our own silence, is what we report. */
  char *p;
  if (recv_next(comm, fd, &h, &p, deadline + 3000000000ull) != 0) return io_error(comm, "join");
  weft_status_t st = h.type == WEFT__BS_READY ? WEFT_SUCCESS : unexpected(comm, &h, p, "join");
  if (h.type == WEFT__BS_READY && h.len >= 4) {
    int32_t host;
    memcpy(&host, p, 4);
    comm->root_host_rank = host >= 0 && host < comm->nranks ? host : -1;
  }
  free(p);
  return st;
}

weft_status_t weft__bootstrap_allgather(struct weft_comm *comm, const void *mine, size_t bytes,
                                        void *all) {
  if (comm->bootstrap_failed_rank != -2) return note_failure(comm, comm->bootstrap_failed_rank, "");
  uint64_t deadline = weft__deadline_after_ms(comm->timeout_ms);
  weft__bs_header h = {WEFT__BS_GATHER, (uint32_t)bytes};
  if (weft__sock_send_all(comm->bootstrap_fd, &h, sizeof(h), deadline) != 0 ||
      (bytes > 0 && weft__sock_send_all(comm->bootstrap_fd, mine, bytes, deadline) != 0))
    return io_error(comm, "all-gather");
  char *p;
  if (recv_next(comm, comm->bootstrap_fd, &h, &p, deadline) != 0) return io_error(comm, "all-gather");
  weft_status_t st = WEFT_SUCCESS;
  if (h.type != WEFT__BS_GATHERED)
    st = unexpected(comm, &h, p, "all-gather");
  else if (h.len != bytes * (size_t)comm->nranks)
    st = weft__error(comm, WEFT_ERR_INTERNAL, "rank %d: bootstrap all-gather returned %u bytes, expected %zu",
                     comm->rank, h.len, bytes * (size_t)comm->nranks);
  else if (h.len > 0)
    memcpy(all, p, h.len);
  free(p);
  return st;
}

weft_status_t weft__bootstrap_barrier(struct weft_comm *comm) {
  char none = 0;
  return weft__bootstrap_allgather(comm, &none, 0, &none);
}

weft_status_t weft__bootstrap_check_failure(struct weft_comm *comm, int *failed_rank,
                                            const char **why) {
  if (comm->bootstrap_failed_rank == -2 && comm->bootstrap_fd >= 0) {
    struct pollfd p = {.fd = comm->bootstrap_fd, .events = POLLIN};
    if (poll(&p, 1, 0) > 0) {
      weft__bs_header h;
      char *payload;
      if (recv_msg(comm->bootstrap_fd, &h, &payload, weft__deadline_after_ms(1000)) != 0) {
        comm->bootstrap_failed_rank = -1;
        snprintf(comm->bootstrap_failed_text, sizeof(comm->bootstrap_failed_text),
                 "the bootstrap root (in the process that created the unique id) exited");
      } else if (h.type == WEFT__BS_HOST_LEFT) {
        comm->root_host_rank = -1;
      } else if (h.type == WEFT__BS_FAILED && h.len >= 4) {
        int32_t failed;
        memcpy(&failed, payload, 4);
        comm->bootstrap_failed_rank = failed;
        snprintf(comm->bootstrap_failed_text, sizeof(comm->bootstrap_failed_text), "%s", payload + 4);
      }
      free(payload);
    }
  }
  if (comm->bootstrap_failed_rank == -2) return WEFT_SUCCESS;
  *failed_rank = comm->bootstrap_failed_rank;
  *why = comm->bootstrap_failed_text;
  return WEFT_ERR_REMOTE;
}

void weft__bootstrap_leave(struct weft_comm *comm) {
  if (comm->bootstrap_fd < 0) return;
  weft__bs_header h = {WEFT__BS_BYE, 0};
  weft__sock_send_all(comm->bootstrap_fd, &h, sizeof(h), weft__deadline_after_ms(1000));
  if (comm->root_host_rank == comm->rank) {
    /* This process hosts the root and may exit right after: wait (1 s at most) until the
     * root has told the others that this rank left cleanly (it closes our connection
     * after), so its end closing with the process is not taken for this rank's failure. */
    char drain[64];
    uint64_t deadline = weft__deadline_after_ms(1000);
    struct pollfd p = {.fd = comm->bootstrap_fd, .events = POLLIN};
    while (poll(&p, 1, weft__ms_left(deadline)) > 0 && recv(comm->bootstrap_fd, drain, sizeof(drain), 0) > 0) {
    }
  }
  close(comm->bootstrap_fd);
  comm->bootstrap_fd = -1;
}

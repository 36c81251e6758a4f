/* shm_segment.h: shared-memory segments that never appear in /dev/shm, and the abstract
 * Unix sockets that hand them to peers.
 *
 * A segment is a memfd (anonymous, close-on-exec, sealed against resizing) mapped
 * MAP_SHARED. Its fd travels to a peer with SCM_RIGHTS over an abstract-namespace socket
 * named after the communicator's secret and the rank; the peer maps it and closes the fd.
 * The kernel frees the memory when the last process unmaps it, on destroy or on death, so
 * nothing is ever left to clean up. All calls are Linux-only and return 0, or -1 with
 * errno set. */
#ifndef WEFT_SHM_SEGMENT_H
#define WEFT_SHM_SEGMENT_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
  void *base;   /* NULL when not mapped */
  size_t bytes;
  int fd;       /* -1 once closed */
} weft__shm_segment;

#define WEFT__SHM_SEGMENT_INIT {NULL, 0, -1}

/* Creates a zero-filled memfd segment of bytes (name is shown in /proc/pid/maps), maps it
 * and keeps the fd open for sending. */
int weft__shm_segment_create(weft__shm_segment *seg, const char *name, size_t bytes);
/* Maps a peer's segment from fd, which must hold at least bytes; closes fd either way. */
int weft__shm_segment_map_fd(weft__shm_segment *seg, int fd, size_t bytes);
/* Closes the fd (mapping stays). */
void weft__shm_segment_close_fd(weft__shm_segment *seg);
/* Closes the fd and unmaps; safe on a zeroed or already released segment. */
void weft__shm_segment_release(weft__shm_segment *seg);

/* Readies len bytes at addr (page-aligned, in a segment mapping) for use without faults:
 * populates their page tables for writing (MADV_POPULATE_WRITE where the kernel has it)
 * and, when write_pages, writes one byte of each page with the value it holds. Why the
 * writes: populated but not yet written through a mapping, the first use of each page
 * cost its writer ~5-10 us on the development VM (2 ranks, 8-byte all-reduce, each call
 * timed: every other one of the first 64 calls, one per new LL page, took 5-14 us against
 * 0.5, ~300 us in all, with no page fault counted in either process); the receiver's
 * write at setup halved it and the sender's removed it, 4 launches each way. The guest
 * saw no fault, so the cost is below it (the hypervisor, on a page's first write through
 * a mapping). The caller makes sure nobody else writes those bytes meanwhile. */
void weft__shm_prefault(void *addr, size_t len, int write_pages);
/* Maps len bytes at addr into this process's page tables for reading (MADV_POPULATE_READ
 * where the kernel has it), writing nothing: safe while another process writes them. */
void weft__shm_prefault_read(void *addr, size_t len);

/* Listens on the abstract socket "\0weft-<16 hex of a keyed hash of secret>-<rank>"
 * (SOCK_SEQPACKET, non-blocking, close-on-exec); the name never shows the secret, and
 * whoever connects must still prove it (shm_setup.c). Returns the fd or -1. */
int weft__shm_sock_listen(const uint8_t secret[16], int rank, int backlog);
/* Connects to rank's listening socket; retries while it is missing or full, until
 * deadline_ns (then ETIMEDOUT). Returns a non-blocking fd or -1. */
int weft__shm_sock_connect(const uint8_t secret[16], int rank, uint64_t deadline_ns);
/* Accepts one connection by deadline_ns: a non-blocking fd, or -1 (ETIMEDOUT). */
int weft__shm_sock_accept(int listen_fd, uint64_t deadline_ns);
/* Sends one message of len bytes, with pass_fd attached unless it is -1, by deadline_ns. */
int weft__shm_sock_send(int fd, const void *buf, size_t len, int pass_fd, uint64_t deadline_ns);
/* Receives one message of exactly len bytes by deadline_ns (ECONNRESET on EOF, EPROTO on a
 * short message). *got_fd (may be NULL) receives an attached fd or -1; extra fds are closed. */
int weft__shm_sock_recv(int fd, void *buf, size_t len, int *got_fd, uint64_t deadline_ns);
#endif

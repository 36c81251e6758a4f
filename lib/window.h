/* window.h: registered windows (weft_comm_window_register): a rank's buffer in memory from
 * weft_mem_alloc (or another space's alloc, mem/space.h), or plain host memory adopted
 * (mem/host_adopt.h), with every peer's buffer of the same registration imported here
 * through that space, so the direct algorithms (algos/direct.h) read and write peers'
 * buffers in place. */
#ifndef WEFT_LIB_WINDOW_H
#define WEFT_LIB_WINDOW_H
#include <stddef.h>
#include <stdint.h>
#include "weft.h"
#include "mem/host_adopt.h"
#include "mem/space.h"

struct weft_comm;

/* WEFT_DIRECT_MIN_BYTES's default: where the direct algorithms start to win on 2 ranks
 * (buffer bytes, us per call, direct against the usual algorithm): broadcast 0.44-0.66 /
 * 0.31-0.45 at 2 KiB, 0.54-0.61 / 1.15-1.43 at 8 KiB; all-to-all 0.36-0.39 / 0.31-0.33 at
 * 2 KiB, 0.45-0.49 / 0.82-1.19 at 8 KiB; all-reduce 0.39-0.52 / 0.53-0.56 at 2 KiB;
 * all-gather and reduce-scatter even at 2 KiB. Windows and registrations (lib/reg.h). */
#define WEFT__DIRECT_MIN_BYTES_DEFAULT (4u << 10)

struct weft_window {
  struct weft_comm *comm;
  int comm_rank;     /* comm's rank here */
  uint64_t id;       /* registration number on comm, from 1: the same on every rank */
  char *base;        /* this rank's buffer */
  size_t bytes;
  int usable;        /* every rank mapped every peer's buffer (agreed at registration) */
  const weft__mem_space *space; /* the space of base, which imported the peers' buffers */
  char **peer_base;  /* [nranks]: rank j's buffer as mapped here (ours: base, or our view of
                        it when adopted); NULL if not */
  size_t *peer_bytes;  /* [nranks] */
  weft__mem_mapping *maps; /* [nranks]: what the space imported (ours: none) */
  void *tr_handles[8];  /* each transport's registration (its reg), by registry index */
  weft__adopted *adopted; /* plain memory made importable (host_adopt.h), or NULL */
  struct weft_window *next;
};

/* The window of comm holding [p, p + bytes) on this rank, usable for direct collectives,
 * or NULL. Caller holds comm->lock. */
struct weft_window *weft__window_find(struct weft_comm *comm, const void *p, size_t bytes);
/* Where this rank's p (inside w) is reached by the direct algorithms: p itself, or its
 * place in our view of an adopted buffer (whose edges algos/direct.c moves). */
static inline char *weft__window_self(const struct weft_window *w, const void *p) {
  return w->peer_base[w->comm_rank] + ((const char *)p - w->base);
}
struct weft__task;
/* The bytes by which the direct algorithms size a call: its larger buffer (nccl-tests'
 * size): all-gather, reduce-scatter and all-to-all move nranks blocks of count elements,
 * the other collectives count elements. */
size_t weft__direct_call_bytes(const struct weft__task *t);
/* 1 when a call of bytes (weft__direct_call_bytes, > 0) is large enough for the direct
 * algorithms on comm's windows: from WEFT_DIRECT_MIN_BYTES, 16 times that with more ranks
 * than cores. The same on every rank (agreed at registration). Thread-safe. */
int weft__window_direct_size(const struct weft_comm *comm, size_t bytes);
/* The window of comm registered with id, or NULL. Caller holds comm->lock. */
struct weft_window *weft__window_by_id(struct weft_comm *comm, uint64_t id);
/* Unmaps and frees every window of comm (at destroy; peers are gone or going). */
void weft__window_free_all(struct weft_comm *comm);
#endif

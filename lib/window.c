/* window.c: weft_comm_window_register / weft_comm_window_deregister.
 *
 * Registration is collective. Every rank all-gathers a descriptor of its buffer (the
 * handle its memory space exports: for host memory the pid and the memfd behind it from
 * weft_mem_alloc, the offset and length; plain host memory is first adopted, its pages
 * moved into a memfd of its own, mem/host_adopt.h) and imports each peer's buffer through
 * its space (host: opening /proc/<pid>/fd/<fd>, mem/host.c). Windows are usable for direct
 * collectives only when every peer's transport lets this rank reach that peer's memory
 * (WEFT__TRANSPORT_CAP_PEER_MEMORY, transports/transport.h: shm) and every rank's buffer
 * is of the same memory kind. A second
 * all-gather agrees on the outcome, so a window is usable for direct collectives on every
 * rank or on none; an unusable window stays registered (plain memory is not adopted then,
 * or given back), and one info line says why.
 * Windows get ids in registration order, the same on every rank, so a call can name a
 * peer's buffer as (window id, offset). Like NCCL's ncclCommWindowRegister (symmetric
 * memory); no code taken.
 * Environment (read at registration, agreed by taking every rank's into account):
 *   WEFT_DIRECT=0 makes windows unusable for direct collectives (default 1);
 *   WEFT_DIRECT_MIN_BYTES (default 4K): collectives whose larger buffer is smaller take
 *   the usual path (16 times that with more ranks than cores: algos/direct.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/env.h"
#include "lib/log.h"
#include "lib/status.h"
#include "lib/task.h"
#include "lib/window.h"
#include "transports/transport.h"


/* What each rank all-gathers at registration. */
typedef struct {
  int32_t reason;    /* 0: arguments valid, buffer inside one weft_mem_alloc block; else
                        an index into reasons[] */
  int32_t kind;      /* the buffer's memory kind (mem/space.h) */
  int32_t direct;    /* WEFT_DIRECT on this rank */
  int32_t pad;
  weft__mem_handle handle; /* what the space exported */
  uint64_t min_bytes; /* WEFT_DIRECT_MIN_BYTES on this rank */
} window_desc;

static const char *const reasons[] = {
    "ok", "buff is NULL", "win is NULL", "size is 0", "flags must be 0",
    "the buffer is not inside one weft_mem_alloc block, nor private memory weft can share "
    "(malloc'd memory; not a file or shared mapping, not the stack)",
    "the buffer overlaps a registered plain buffer without lying inside it",
    "sharing the buffer's pages failed (memfd_create, mmap or mremap: this rank's log says why)"};
enum { REASON_NOT_SHAREABLE = 5, REASON_OVERLAP = 6, REASON_ADOPT_FAILED = 7 };

/* reasons[]'s index for an outcome of weft__host_adopt (mem/host_adopt.h). */
static int adopt_reason(const struct weft_comm *comm, void *buff, size_t size, int outcome) {
  if (outcome == 0) return 0;
  if (outcome == WEFT__ADOPT_NOT_PRIVATE) return REASON_NOT_SHAREABLE;
  if (outcome == WEFT__ADOPT_OVERLAP) return REASON_OVERLAP;
  WEFT_INFO("window: rank %d: the buffer %p (%zu bytes) %s: %s", comm->rank, buff, size,
            weft__host_adopt_why(outcome), strerror(outcome));
  return REASON_ADOPT_FAILED;
}

struct weft_window *weft__window_find(struct weft_comm *comm, const void *p, size_t bytes) {
  uintptr_t a = (uintptr_t)p;
  for (struct weft_window *w = comm->windows; w != NULL; w = w->next) {
    uintptr_t lo = (uintptr_t)w->base;
    if (w->usable && p != NULL && a >= lo && weft__span_fits(a - lo, bytes, w->bytes)) return w;
  }
  return NULL;
}

size_t weft__direct_call_bytes(const struct weft__task *t) {
  size_t bytes = t->count * weft__dtype_size(t->dtype);
  if (t->coll == WEFT__COLL_ALL_GATHER || t->coll == WEFT__COLL_REDUCE_SCATTER || t->coll == WEFT__COLL_ALL_TO_ALL)
    bytes *= (size_t)t->comm->nranks;
  return bytes;
}

/* With more ranks than cores each handshake waits for descheduled ranks: 4 ranks on 2
 * cores measured ~6 us per direct call at any small size, so the usual algorithms win up
 * to 4-64 KiB (all-reduce 6.5 / 5.0-8.2 us at 4 KiB, broadcast 8.2-11.3 / 8.5-10.1 at
 * 64 KiB, all-to-all 8.7 / 10.2-16.7 at 64 KiB). */
int weft__window_direct_size(const struct weft_comm *comm, size_t bytes) {
  size_t min = comm->oversubscribed ? comm->direct_min_bytes * 16 : comm->direct_min_bytes;
  return bytes > 0 && bytes >= min;
}

struct weft_window *weft__window_by_id(struct weft_comm *comm, uint64_t id) {
  for (struct weft_window *w = comm->windows; w != NULL; w = w->next)
    if (w->id == id) return w;
  return NULL;
}

static void unmap_peers(struct weft_window *w) {
  for (int j = 0; w->maps != NULL && j < w->comm->nranks; j++) {
    w->space->unimport(w->space, &w->maps[j]);
    if (w->peer_base != NULL && j != w->comm->rank) w->peer_base[j] = NULL;
  }
}

/* Registers the window with every transport that registers memory (RDMA-style); 0 on
 * success. Every rank calls every transport alike: registration is collective. */
static weft_status_t register_with_transports(struct weft_window *w) {
  for (int t = 0; weft__transports[t] != NULL; t++)
    if (weft__transports[t]->reg != NULL)
      WEFT_TRY(weft__transports[t]->reg(w->comm, w->space, w->base, w->bytes, &w->tr_handles[t]));
  return WEFT_SUCCESS;
}

static void window_free(struct weft_window *w) {
  if (w == NULL) return;
  for (int t = 0; weft__transports[t] != NULL; t++)
    if (w->tr_handles[t] != NULL) weft__transports[t]->dereg(w->comm, w->tr_handles[t]);
  unmap_peers(w);
  weft__host_adopt_release(w->adopted);
  free(w->peer_base);
  free(w->peer_bytes);
  free(w->maps);
  free(w);
}

void weft__window_free_all(struct weft_comm *comm) {
  while (comm->windows != NULL) {
    struct weft_window *w = comm->windows;
    comm->windows = w->next;
    window_free(w);
  }
  comm->direct_windows = 0;
}

/* Imports rank j's buffer described by d into w; 0 or an errno. */
static int map_peer(struct weft_window *w, int j, const window_desc *d) {
  int err = w->space->import_buf(w->space, &d->handle, &w->maps[j]);
  if (err != 0) return err;
  w->peer_base[j] = w->maps[j].base;
  w->peer_bytes[j] = (size_t)d->handle.bytes;
  return 0;
}

static struct weft_window *window_new(struct weft_comm *comm, void *buff, size_t size,
                                      const weft__mem_space *space) {
  struct weft_window *w = calloc(1, sizeof *w);
  size_t n = (size_t)comm->nranks;
  if (w == NULL) return NULL;
  w->comm = comm;
  w->comm_rank = comm->rank;
  w->base = buff;
  w->bytes = size;
  w->space = space;
  w->peer_base = calloc(n, sizeof *w->peer_base);
  w->peer_bytes = calloc(n, sizeof *w->peer_bytes);
  w->maps = calloc(n, sizeof *w->maps);
  if (!w->peer_base || !w->peer_bytes || !w->maps) {
    window_free(w);
    return NULL;
  }
  w->peer_base[comm->rank] = buff;
  w->peer_bytes[comm->rank] = size;
  return w;
}

/* Whether every peer's transport lets this rank load and store that peer's imported
 * buffers (WEFT__TRANSPORT_CAP_PEER_MEMORY: shm; not a socket). The same on every rank:
 * the capabilities of a pair's transport are symmetric. */
static int all_peer_memory(const struct weft_comm *comm) {
  return (comm->caps_all & WEFT__TRANSPORT_CAP_PEER_MEMORY) != 0;
}

/* Maps every peer's buffer; returns 1 when all worked, else 0 with *bad_peer, *err set. */
static int map_all(struct weft_window *w, const window_desc *all, int *bad_peer, int *err) {
  struct weft_comm *comm = w->comm;
  for (int j = 0; j < comm->nranks; j++) {
    if (j == comm->rank) continue;
    if ((*err = map_peer(w, j, &all[j])) != 0) {
      *bad_peer = j;
      return 0;
    }
  }
  return 1;
}

weft_status_t weft_comm_window_register(weft_comm_t comm, void *buff, size_t size,
                                        weft_window_t *win, int flags) {
  if (comm == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_comm_window_register: comm is NULL");
  if (win != NULL) *win = NULL;
  WEFT_TRY(weft__comm_wait_ready(comm));
  /* A rank with bad arguments still joins the exchange, so every rank fails at once with
   * the same message instead of its peers waiting for a deadline. */
  int reason = 0, n = comm->nranks;
  const weft__mem_space *space = weft__mem_space_of(buff);
  weft__mem_handle handle = {0};
  weft__adopted *adopted = NULL;
  int direct = weft__env_long("WEFT_DIRECT", 1) != 0;
  if (buff == NULL) reason = 1;
  else if (win == NULL) reason = 2;
  else if (size == 0) reason = 3;
  else if (flags != 0) reason = 4;
  else if (!space->export_buf(space, buff, size, &handle)) {
    /* Plain memory: adopted only where this rank could use the window (else it stays as
     * it is, and the window is unusable on every rank anyway). */
    if (space != &weft__mem_host) reason = REASON_NOT_SHAREABLE;
    else if (direct && n > 1 && all_peer_memory(comm)) /* adoption checks the memory itself */
      reason = adopt_reason(comm, buff, size, weft__host_adopt_export(buff, size, &adopted, &handle));
    else if (!weft__host_adoptable(buff, size)) reason = REASON_NOT_SHAREABLE;
  }
  window_desc mine = {.reason = reason, .kind = (int32_t)space->kind, .direct = direct, .handle = handle,
                      .min_bytes = weft__env_size("WEFT_DIRECT_MIN_BYTES", WEFT__DIRECT_MIN_BYTES_DEFAULT)};
  window_desc *all = calloc((size_t)n, sizeof *all);
  if (all == NULL) {
    weft__host_adopt_release(adopted);
    return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: window register: out of memory", comm->rank);
  }
  weft_status_t st = weft_all_gather(&mine, all, sizeof mine, WEFT_UINT8, comm, NULL);
  for (int j = 0; st == WEFT_SUCCESS && j < n; j++) {
    int r = all[j].reason;
    if (r == 0) continue;
    const char *text = r > 0 && r < (int)(sizeof reasons / sizeof *reasons) ? reasons[r] : "?";
    st = j == comm->rank
             ? weft__error(comm, WEFT_ERR_INVALID_ARGUMENT, "rank %d: window register: %s", comm->rank, text)
             : weft__error(comm, WEFT_ERR_INVALID_ARGUMENT,
                           "rank %d: window register: peer %d's arguments were rejected: %s",
                           comm->rank, j, text);
  }
  if (st != WEFT_SUCCESS) {
    free(all);
    weft__host_adopt_release(adopted);
    return st;
  }
  struct weft_window *w = window_new(comm, buff, size, space);
  if (w != NULL && adopted != NULL) {
    w->adopted = adopted;
    w->peer_base[comm->rank] = weft__adopted_view(adopted, buff);
  } else {
    weft__host_adopt_release(adopted);
  }
  /* A failed registration counts as "not registered here": every rank then fails alike. */
  weft_status_t reg = w != NULL ? register_with_transports(w) : WEFT_SUCCESS;
  if (reg != WEFT_SUCCESS) {
    window_free(w);
    w = NULL;
  }
  int want = w != NULL && all_peer_memory(comm) && n > 1, bad_peer = -1, err = 0;
  for (int j = 0; j < n; j++) want = want && all[j].direct && all[j].kind == (int32_t)space->kind;
  int mapped = want && map_all(w, all, &bad_peer, &err);
  size_t min_bytes = 0;
  for (int j = 0; j < n; j++)
    if (all[j].min_bytes > min_bytes) min_bytes = (size_t)all[j].min_bytes;
  /* Second exchange: bit 0 "registered here" (else out of memory: every rank fails, so
   * window ids stay equal everywhere), bit 1 "mapped every peer". */
  int32_t *oks = calloc((size_t)n, sizeof *oks);
  int32_t mine2 = (w != NULL ? 1 : 0) | (mapped ? 2 : 0), usable = mapped, failed = -1;
  st = oks == NULL ? weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: window register: out of memory", comm->rank)
                   : weft_all_gather(&mine2, oks, sizeof mine2, WEFT_UINT8, comm, NULL);
  for (int j = 0; st == WEFT_SUCCESS && j < n; j++) {
    usable = usable && (oks[j] & 2);
    if (!(oks[j] & 1) && failed < 0) failed = j;
  }
  free(oks);
  free(all);
  if (st == WEFT_SUCCESS && failed >= 0 && reg != WEFT_SUCCESS && failed == comm->rank) st = reg;
  else if (st == WEFT_SUCCESS && failed >= 0)
    st = weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: window register: %s could not register it "
                     "(out of memory, or a transport refused it)", comm->rank,
                     failed == comm->rank ? "this rank" : "a peer");
  if (st != WEFT_SUCCESS) {
    window_free(w);
    return st;
  }
  if (!usable) {
    unmap_peers(w);
    weft__host_adopt_release(w->adopted); /* private pages again: nothing will map them */
    w->adopted = NULL;
    w->peer_base[comm->rank] = buff;
  }
  if (want && !mapped)
    WEFT_INFO("window: rank %d cannot map the buffer of peer %d (%s%s); collectives on this "
              "window take the usual path", comm->rank, bad_peer, strerror(err),
              err == EACCES || err == EPERM ? ": other user, or no ptrace read access?" : "");
  else if (!usable)
    WEFT_INFO("window: not usable for direct collectives on rank %d (%s)", comm->rank,
              n < 2 ? "one rank" : !all_peer_memory(comm) ? "some peer's transport cannot reach its memory (ranks on several hosts, or not over shm)"
              : mapped ? "a peer could not map a buffer"
              : "WEFT_DIRECT=0 on some rank, or ranks' buffers of different memory kinds");
  w->usable = usable;
  weft__op_lock_take(&comm->lock);
  w->id = ++comm->window_serial;
  w->next = comm->windows;
  comm->windows = w;
  comm->direct_windows += usable;
  comm->direct_min_bytes = min_bytes;
  weft__op_lock_release(&comm->lock);
  *win = w;
  return WEFT_SUCCESS;
}

weft_status_t weft_comm_window_deregister(weft_comm_t comm, weft_window_t win) {
  if (comm == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_comm_window_deregister: comm is NULL");
  if (win == NULL) return WEFT_SUCCESS;
  weft__op_lock_take(&comm->lock);
  struct weft_window **at = &comm->windows;
  while (*at != NULL && *at != win) at = &(*at)->next;
  int found = *at != NULL;
  weft__op_lock_release(&comm->lock);
  if (!found)
    return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT,
                       "rank %d: window deregister: the window is not registered on this communicator",
                       comm->rank);
  /* Collective: no rank may still name this window in a call when it goes. */
  WEFT_TRY(weft_barrier(comm, NULL));
  weft__op_lock_take(&comm->lock);
  for (at = &comm->windows; *at != NULL && *at != win; at = &(*at)->next) {
  }
  if (*at != NULL) *at = win->next;
  comm->direct_windows -= win->usable;
  weft__op_lock_release(&comm->lock);
  window_free(win);
  return WEFT_SUCCESS;
}

/* direct.c: the driver of the direct algorithms (phases and costs in algos/direct.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "algos/direct.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/select.h"
#include "lib/log.h"
#include "lib/reg.h"
#include "lib/status.h"
#include "lib/stream_cuda.h"
#include "lib/window.h"

#define DESC_MAGIC 0x57444952u /* "WDIR" */
#define NOT_NEEDED UINT64_MAX  /* window id of a buffer this rank does not use */
#define LOCAL_REG (UINT64_MAX - 1) /* "window id" of a buffer in a registration (lib/reg.h) */

/* Where one of a rank's buffers is: a window id and offset, or a registration of its
 * process (what a peer imports to reach it, lib/reg.h) and the offset in it. */
typedef struct {
  uint64_t win;          /* window id; 0: in no window or registration; NOT_NEEDED; LOCAL_REG */
  uint64_t off;          /* of the buffer in the window or the registration */
  uint64_t serial;       /* LOCAL_REG: the registration, in process pid */
  int32_t pid, fd;       /* LOCAL_REG: its memfd ... */
  uint64_t h_off, h_bytes; /* ... holds it at h_off, h_bytes long */
} buf_desc;

/* Phase 1's message: where this rank's buffers are, and which call it is in (a peer in a
 * different call gets an error naming both, not a wrong result). */
typedef struct {
  uint32_t magic;
  uint32_t coll;
  uint64_t count;
  buf_desc send, recv;
} direct_desc;

/* One of this rank's buffers as its own share of the work reaches it. */
typedef struct {
  char *self;             /* the buffer, or its place in our view of adopted memory */
  weft__adopted *adopted; /* the adoption whose edges move around the call, or NULL */
} own_buf;

enum { PHASE_EXCHANGE, PHASE_DONE };

typedef struct {
  const weft__direct_ops *ops;
  int phase;
  direct_desc mine;
  direct_desc *descs;  /* [nranks] */
  weft__req *reqs;     /* [4 * nranks]: descriptor send, descriptor recv, done send, done recv */
  char **in, **out;    /* [nranks] */
  own_buf send_own, recv_own;
  size_t recv_bytes;   /* this rank's receive extent */
  weft__fp_call call;  /* the call's fingerprint marked WEFT__FP_DIRECT, on every message */
} direct_state;

static const weft__direct_ops *ops_of(weft__coll_t coll) {
  switch (coll) {
    case WEFT__COLL_ALL_REDUCE: return &weft__direct_all_reduce;
    case WEFT__COLL_ALL_GATHER: return &weft__direct_all_gather;
    case WEFT__COLL_REDUCE_SCATTER: return &weft__direct_reduce_scatter;
    case WEFT__COLL_ALL_TO_ALL: return &weft__direct_all_to_all;
    case WEFT__COLL_BROADCAST: return &weft__direct_broadcast;
    default: return NULL;
  }
}

/* Whether this rank registered both of t's buffers (weft_comm_register, lib/reg.h). */
static int registered_here(const weft__task *t, const weft__direct_ops *ops) {
  struct weft_comm *comm = t->comm;
  size_t send_bytes, recv_bytes;
  if (!ops->extents(t, comm->rank, &send_bytes, &recv_bytes) || recv_bytes == 0) return 0;
  if (weft__reg_find(comm, t->recvbuf, recv_bytes) == NULL) return 0;
  return send_bytes == 0 || weft__reg_find(comm, t->sendbuf, send_bytes) != NULL;
}

int weft__direct_wanted(const weft__task *t) {
  const struct weft_comm *comm = t->comm;
  const weft__direct_ops *ops = ops_of(t->coll);
  if (!weft__comm_has_registrations(comm) || ops == NULL) return 0;
  size_t bytes = weft__direct_call_bytes(t);
  /* the same on every rank (registration was collective) */
  if (comm->direct_windows > 0 && weft__window_direct_size(comm, bytes)) return 1;
  /* Registrations are this rank's own: as NCCL requires, every rank passes registered
   * buffers or none does, so each decides alike (and a rank that does not is caught by the
   * fingerprint: lib/reg.h). */
  size_t min = comm->oversubscribed ? comm->reg_min_bytes * 16 : comm->reg_min_bytes;
  return comm->regs != NULL && bytes >= min && bytes > 0 && registered_here(t, ops);
}

void weft__direct_copy(const weft__task *t, void *dst, const void *src, size_t n, size_t out_bytes) {
  if (dst == src) return;
  weft__mem_copy(t->mem, dst, src, n, weft__mem_nt_flag(out_bytes, 0));
}

/* Describes this rank's buffer [p, p + bytes) for its peers in *d, and how our own share
 * of the work reaches it in *o; copies its edges into our view when it is adopted plain
 * memory (peers read them there: mem/host_adopt.h). */
static void locate(struct weft_comm *comm, const void *p, size_t bytes, buf_desc *d, own_buf *o) {
  memset(d, 0, sizeof *d);
  o->self = (char *)p;
  o->adopted = NULL;
  if (bytes == 0) return;
  struct weft_window *w = weft__window_find(comm, p, bytes);
  struct weft_reg *r = w == NULL ? weft__reg_find(comm, p, bytes) : NULL;
  if (w != NULL) {
    d->win = w->id;
    d->off = (uint64_t)((const char *)p - w->base);
    o->self = weft__window_self(w, p);
    o->adopted = w->adopted;
  } else if (r != NULL) {
    d->win = LOCAL_REG;
    d->off = (uint64_t)((const char *)p - r->base);
    d->serial = r->serial;
    d->pid = r->handle.pid;
    d->fd = r->handle.fd;
    d->h_off = r->handle.offset;
    d->h_bytes = r->handle.bytes;
    o->adopted = r->adopted;
    if (r->adopted != NULL) o->self = weft__adopted_view(r->adopted, p);
  }
  if (o->adopted != NULL) weft__adopted_sync(o->adopted, p, bytes, 1);
}

/* Posts r on the connection to peer j with the call's direct fingerprint. */
static void post(weft__task *t, direct_state *st, int j, weft__req *r) {
  r->call = &st->call;
  weft__req_post(weft__comm_conn(t->comm, j), r);
}

weft_status_t weft__direct_start(weft__task *t) {
  struct weft_comm *comm = t->comm;
  int n = comm->nranks;
  size_t per = sizeof(direct_desc) + 4 * sizeof(weft__req) + 2 * sizeof(char *);
  weft_status_t status;
  direct_state *st = weft__algo_state_alloc(t, sizeof(direct_state), (size_t)n * per, &status);
  if (st == NULL) return status;
  st->reqs = (weft__req *)(st + 1);
  st->descs = (direct_desc *)(st->reqs + 4 * (size_t)n);
  st->in = (char **)(st->descs + n);
  st->out = st->in + n;
  st->ops = ops_of(t->coll);
  st->phase = PHASE_EXCHANGE;
  st->call = comm->call;
  st->call.fp.type |= WEFT__FP_DIRECT;
  st->call.hash = weft__fp_hash(&st->call.fp);
  direct_desc *m = &st->mine;
  m->magic = DESC_MAGIC;
  m->coll = (uint32_t)t->coll;
  m->count = t->count;
  size_t send_bytes, recv_bytes;
  if (st->ops == NULL || !st->ops->extents(t, comm->rank, &send_bytes, &recv_bytes)) {
    m->send.win = m->recv.win = 0; /* every rank falls back */
  } else {
    locate(comm, t->recvbuf, recv_bytes, &m->recv, &st->recv_own);
    st->recv_bytes = recv_bytes;
    if (send_bytes == 0) m->send.win = NOT_NEEDED;
    else locate(comm, t->sendbuf, send_bytes, &m->send, &st->send_own);
  }
  for (int j = 0; j < n; j++) {
    if (j == comm->rank) continue;
    weft__req_init_recv(&st->reqs[n + j], &weft__mem_host, &st->descs[j], NULL, sizeof(direct_desc), WEFT_UINT8, WEFT_SUM);
    post(t, st, j, &st->reqs[n + j]);
    weft__req_init_send(&st->reqs[j], &weft__mem_host, m, sizeof *m);
    post(t, st, j, &st->reqs[j]);
  }
  st->descs[comm->rank] = *m;
  return WEFT_SUCCESS;
}

/* All of reqs[from * n ..] (two groups of n, self skipped) complete? */
static int phase_complete(const weft__task *t, const direct_state *st, int first_group) {
  int n = t->comm->nranks;
  for (int j = 0; j < n; j++) {
    if (j == t->comm->rank) continue;
    if (!st->reqs[first_group * n + j].complete || !st->reqs[(first_group + 1) * n + j].complete) return 0;
  }
  return 1;
}

/* Rank j's buffer of bytes that d describes, as mapped here (a registration imported on
 * first use: lib/reg.h); NULL with an error raised in *status when d names something j did
 * not register or this rank cannot map. */
static char *resolve(weft__task *t, int j, const buf_desc *d, size_t bytes, const char *what,
                     weft_status_t *status) {
  struct weft_comm *comm = t->comm;
  char desc[160];
  if (d->win == LOCAL_REG) {
    int err = 0;
    char *base = NULL;
    if (d->pid == comm->peers[j].pid && weft__span_fits(d->off, bytes, d->h_bytes)) {
      weft__mem_handle h = {.pid = d->pid, .fd = d->fd, .offset = d->h_off, .bytes = d->h_bytes};
      base = weft__reg_import(comm, j, d->serial, &h, &err);
      if (base != NULL) return base + d->off;
    }
    *status = weft__error(comm, err != 0 ? WEFT_ERR_SYSTEM : WEFT_ERR_INTERNAL,
                          "rank %d: %s direct: peer %d's registered %s buffer (%zu bytes at offset %llu of "
                          "%llu, pid %d) %s%s", comm->rank, weft__task_describe(t, desc, sizeof desc), j, what,
                          bytes, (unsigned long long)d->off, (unsigned long long)d->h_bytes, (int)d->pid,
                          err != 0 ? "cannot be mapped here: " : "is not what it registered",
                          err != 0 ? strerror(err) : "");
    return NULL;
  }
  struct weft_window *w = weft__window_by_id(comm, d->win);
  if (w != NULL && w->usable && w->peer_base[j] != NULL && weft__span_fits(d->off, bytes, w->peer_bytes[j]))
    return w->peer_base[j] + d->off;
  *status = weft__error(comm, WEFT_ERR_INTERNAL,
                        "rank %d: %s direct: peer %d's %s buffer (window %llu, offset %llu, %zu "
                        "bytes) is not inside what it registered", comm->rank,
                        weft__task_describe(t, desc, sizeof desc), j, what,
                        (unsigned long long)d->win, (unsigned long long)d->off, bytes);
  return NULL;
}

/* Hands the task over to the tuner's usual algorithm (every rank does, having seen the
 * same descriptors). */
static weft_status_t fall_back(weft__task *t) {
  const weft__algo *usual = weft__select_modelled(t);
  if (usual == NULL) { /* device buffers: only the direct rows take them unstaged (lib/stream_cuda.c) */
    char what[160];
    return weft__error(t->comm, WEFT_ERR_INVALID_USAGE, "rank %d: %s direct: this rank's buffers are in registered "
                       "windows of %s memory, a peer's are not; a call on buffers in device windows needs them in "
                       "windows on every rank", t->comm->rank, weft__task_describe(t, what, sizeof what), t->mem->name);
  }
  t->comm->direct_fallbacks++;
  if (t->state != (void *)t->state_inline) free(t->state);
  t->state = NULL;
  t->algo = usual;
  if (weft__tuner_trace_on()) {
    char what[160];
    weft__log_write(WEFT__LOG_INFO, "tuner: %s: direct: a buffer on some rank is in no window or registration "
                    "(or all-to-all in place): every rank runs %s", weft__task_describe(t, what, sizeof what),
                    t->algo->name);
  }
  weft_status_t st = t->algo->start(t);
  return st == WEFT_SUCCESS ? WEFT_IN_PROGRESS : st;
}

/* Phase 2: checks the descriptors, maps every rank's buffers, does this rank's share. */
static weft_status_t run_work(weft__task *t, direct_state *st) {
  struct weft_comm *comm = t->comm;
  int n = comm->nranks, any_missing = 0;
  char desc[160];
  for (int j = 0; j < n; j++) {
    const direct_desc *d = &st->descs[j];
    if (d->magic != DESC_MAGIC || d->coll != (uint32_t)t->coll || d->count != t->count)
      return weft__error(comm, WEFT_ERR_INVALID_USAGE,
                         "rank %d: %s direct: peer %d is in another call (%s, count %llu)",
                         comm->rank, weft__task_describe(t, desc, sizeof desc), j,
                         d->magic == DESC_MAGIC ? weft__coll_name((weft__coll_t)d->coll) : "not a direct one",
                         (unsigned long long)d->count);
    any_missing |= d->send.win == 0 || d->recv.win == 0;
  }
  if (any_missing) return fall_back(t);
  weft_status_t status = WEFT_SUCCESS;
  for (int j = 0; j < n; j++) {
    const direct_desc *d = &st->descs[j];
    size_t send_bytes, recv_bytes;
    if (j == comm->rank) { /* through our view where the memory is adopted */
      st->in[j] = st->send_own.self;
      st->out[j] = st->recv_own.self;
      continue;
    }
    st->ops->extents(t, j, &send_bytes, &recv_bytes);
    st->in[j] = d->send.win == NOT_NEEDED ? NULL : resolve(t, j, &d->send, send_bytes, "send", &status);
    if (status != WEFT_SUCCESS) return status;
    st->out[j] = resolve(t, j, &d->recv, recv_bytes, "receive", &status);
    if (status != WEFT_SUCCESS) return status;
  }
  weft__direct_bufs b = {st->in, st->out, weft__comm_scratch(t, WEFT__DIRECT_PIECE, &status)};
  if (b.tmp == NULL) return status;
  if (weft__tuner_trace_on())
    weft__log_write(WEFT__LOG_INFO, "tuner: %s: direct (every rank's buffers registered: windows "
                    "or weft_comm_register)", weft__task_describe(t, desc, sizeof desc));
  if (weft__cuda_direct_queued(t)) { /* this rank's share already waits on the caller's CUDA stream */
    status = weft__cuda_direct_release(t, st->in, st->out);
    if (status != WEFT_SUCCESS) return status;
  } else {
    st->ops->work(t, &b);
  }
  comm->direct_calls++;
  weft__mem_wait(t->mem); /* the (non-temporal) stores land before "done" tells peers to read */
  for (int j = 0; j < n; j++) {
    if (j == comm->rank) continue;
    weft__req_init_recv(&st->reqs[3 * n + j], &weft__mem_host, NULL, NULL, 0, WEFT_UINT8, WEFT_SUM);
    post(t, st, j, &st->reqs[3 * n + j]);
    weft__req_init_send(&st->reqs[2 * n + j], &weft__mem_host, NULL, 0);
    post(t, st, j, &st->reqs[2 * n + j]);
  }
  st->phase = PHASE_DONE;
  return WEFT_IN_PROGRESS;
}

weft_status_t weft__direct_progress(weft__task *t) {
  direct_state *st = t->state;
  if (st->phase == PHASE_EXCHANGE) {
    if (!phase_complete(t, st, 0)) return WEFT_IN_PROGRESS;
    const weft__algo *direct = t->algo;
    weft_status_t s = run_work(t, st);
    if (s != WEFT_IN_PROGRESS || t->algo != direct) return s; /* error, or fell back */
  }
  if (!phase_complete(t, st, 2)) return WEFT_IN_PROGRESS;
  if (st->recv_own.adopted != NULL) /* peers are done writing its edges in our view */
    weft__adopted_sync(st->recv_own.adopted, t->recvbuf, st->recv_bytes, 0);
  return WEFT_SUCCESS;
}

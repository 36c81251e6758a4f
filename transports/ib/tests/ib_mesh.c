/* ib_mesh.c: see ib_mesh.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "lib/status.h"
#include "transports/ib/tests/ib_mesh.h"

ib_mailbox *ib_mailbox_new(void) {
  void *p = mmap(NULL, sizeof(ib_mailbox), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : memset(p, 0, sizeof(ib_mailbox));
}

void ib_mailbox_free(ib_mailbox *m) {
  if (m != NULL) munmap(m, sizeof(*m));
}

void ib_mesh_run(int n, harness_body_fn body, void *user, int deadline_s) {
  ib_mesh_arg a = {.mailbox = ib_mailbox_new(), .user = user};
  for (int i = 0; i < 16; i++) a.secret[i] = (uint8_t)(0x5a ^ (i * 29));
  harness_opts o = {.nranks = n, .no_init = 1, .deadline_s = deadline_s};
  harness_run(&o, body, &a);
  ib_mailbox_free(a.mailbox);
}

/* Waits for *flag, or for `from` to give up, or the deadline. 1 when the flag came. */
static int await(ib_mailbox *mb, atomic_int *flag, int from, double end) {
  while (!atomic_load(flag)) {
    if (atomic_load(&mb->failed[from]) || harness_now_ms() > end) return 0;
    usleep(500);
  }
  return 1;
}

static weft__ib_opts opts(ib_mesh *m, const ib_mesh_arg *a, int p) {
  return (weft__ib_opts){.secret = a->secret, .self = m->self, .peer = m->peer[p], .timeout_ms = m->timeout_ms};
}

static weft_status_t setup(harness_rank *r, ib_mesh *m, int timeout_ms) {
  ib_mesh_arg *a = r->arg;
  ib_mailbox *mb = a->mailbox;
  memset(m, 0, sizeof(*m));
  m->n = r->nranks;
  m->me = r->rank;
  m->timeout_ms = timeout_ms;
  snprintf(m->self, sizeof(m->self), "rank %d", r->rank);
  for (int p = 0; p < m->n; p++) snprintf(m->peer[p], sizeof(m->peer[p]), "rank %d", p);
  double end = harness_now_ms() + 10000;
  weft__ib_opts o = opts(m, a, m->me);
  WEFT_TRY(weft__ib_listen(0, &o, &mb->listen[m->me], &m->lc));
  atomic_store(&mb->have_listen[m->me], 1);
  for (int p = 0; p < m->n; p++) {
    if (p == m->me) continue;
    if (!await(mb, &mb->have_listen[p], p, end)) return weft__error(NULL, WEFT_ERR_TIMEOUT, "rank %d never listened", p);
    o = opts(m, a, p);
    WEFT_TRY(weft__ib_connect(0, &o, &mb->listen[p], &mb->conn[m->me][p], &m->sc[p]));
    atomic_store(&mb->have_conn[m->me][p], 1);
  }
  for (int p = 0; p < m->n; p++) {
    if (p == m->me) continue;
    if (!await(mb, &mb->have_conn[p][m->me], p, end)) return weft__error(NULL, WEFT_ERR_TIMEOUT, "rank %d never connected", p);
    o = opts(m, a, p);
    WEFT_TRY(weft__ib_accept(m->lc, &o, &mb->conn[p][m->me], &mb->acc[m->me][p], &m->rc[p]));
    atomic_store(&mb->have_acc[m->me][p], 1);
  }
  for (int p = 0; p < m->n; p++) {
    if (p == m->me) continue;
    if (!await(mb, &mb->have_acc[p][m->me], p, end)) return weft__error(NULL, WEFT_ERR_TIMEOUT, "rank %d never accepted", p);
    WEFT_TRY(weft__ib_connect_finish(m->sc[p], &mb->acc[p][m->me]));
  }
  return WEFT_SUCCESS;
}

int ib_mesh_setup_quiet(harness_rank *r, ib_mesh *m, int timeout_ms) {
  weft_status_t st = setup(r, m, timeout_ms);
  if (st != WEFT_SUCCESS) atomic_store(&((ib_mesh_arg *)r->arg)->mailbox->failed[r->rank], 1);
  return st == WEFT_SUCCESS ? 0 : -1;
}

int ib_mesh_setup(harness_rank *r, ib_mesh *m, int timeout_ms) {
  if (ib_mesh_setup_quiet(r, m, timeout_ms) == 0) return 0;
  harness_fail(r, "connecting the mesh: %s", weft_get_last_error(NULL));
  return -1;
}

static uint8_t pattern(size_t i, int src, int dst, size_t size, int iter) {
  return (uint8_t)(i * 131 + (size_t)src * 17 + (size_t)dst * 5 + (size_t)iter * 3 + (size & 0xff));
}

typedef struct {
  uint8_t *sbuf, *rbuf;
  weft__ib_mr *smr, *rmr;
  weft__ib_request *sreq, *rreq;
  int sdone, rdone;
  size_t got;
} peer_io;

static int check(harness_rank *r, const peer_io *io, int p, size_t send, size_t recv, int iter) {
  if (io->got != send) return harness_fail(r, "from rank %d: received %zu bytes, sent %zu", p, io->got, send);
  for (size_t i = 0; i < send; i++)
    if (io->rbuf[i] != pattern(i, p, r->rank, send, iter))
      return harness_fail(r, "from rank %d, %zu bytes: byte %zu is %u, expected %u", p, send, i, io->rbuf[i],
                          pattern(i, p, r->rank, send, iter));
  for (size_t i = send; i < recv + 64; i++)
    if (io->rbuf[i] != 0xEE) return harness_fail(r, "from rank %d: byte %zu past the %zu received was written", p, i, send);
  return 1;
}

/* One round of progress over every peer; *busy = 1 when something is still pending. */
static weft_status_t step(ib_mesh *m, peer_io *io, size_t send, int *busy, int *moved) {
  *busy = 0;
  for (int p = 0; p < m->n; p++) {
    if (p == m->me) continue;
    peer_io *x = &io[p];
    if (x->sreq == NULL && !x->sdone) {
      WEFT_TRY(weft__ib_isend(m->sc[p], x->sbuf, send, 7, x->smr, &x->sreq));
      *moved |= x->sreq != NULL;
    }
    int done = 0;
    if (x->sreq != NULL) {
      WEFT_TRY(weft__ib_test(x->sreq, &done, NULL));
      if (done) x->sreq = NULL, x->sdone = 1, *moved = 1;
    }
    if (x->rreq != NULL) {
      WEFT_TRY(weft__ib_test(x->rreq, &done, &x->got));
      if (done) x->rreq = NULL, x->rdone = 1, *moved = 1;
    }
    *busy |= !x->sdone || !x->rdone;
  }
  return WEFT_SUCCESS;
}

static weft_status_t post_all(ib_mesh *m, peer_io *io, size_t send, size_t recv, int iter) {
  for (int p = 0; p < m->n; p++) {
    if (p == m->me) continue;
    peer_io *x = &io[p];
    x->sbuf = malloc(send + 1);
    x->rbuf = malloc(recv + 64);
    if (x->sbuf == NULL || x->rbuf == NULL) return weft__error(NULL, WEFT_ERR_NO_MEMORY, "test buffers");
    for (size_t i = 0; i < send; i++) x->sbuf[i] = pattern(i, m->me, p, send, iter);
    memset(x->rbuf, 0xEE, recv + 64);
    WEFT_TRY(weft__ib_reg_mr_send(m->sc[p], x->sbuf, send, &x->smr));
    WEFT_TRY(weft__ib_reg_mr_recv(m->rc[p], x->rbuf, recv + 64, &x->rmr));
    WEFT_TRY(weft__ib_irecv(m->rc[p], x->rbuf, recv + 64, 7, x->rmr, &x->rreq));
    if (x->rreq == NULL) return weft__error(NULL, WEFT_ERR_INTERNAL, "irecv found no free request slot");
  }
  return WEFT_SUCCESS;
}

weft_status_t ib_mesh_exchange_sizes(harness_rank *r, ib_mesh *m, size_t send, size_t recv, int iter,
                                     int deadline_ms) {
  peer_io io[IB_MESH_MAX];
  memset(io, 0, sizeof(io));
  double end = harness_now_ms() + deadline_ms;
  weft_status_t st = post_all(m, io, send, recv, iter);
  int busy = 1;
  while (st == WEFT_SUCCESS && busy) {
    int moved = 0;
    st = step(m, io, send, &busy, &moved);
    if (st == WEFT_SUCCESS && busy && harness_now_ms() > end)
      st = weft__error(NULL, WEFT_ERR_TIMEOUT, "rank %d: the test's exchange of %zu bytes passed its %d ms deadline "
                       "without an error from the engine", m->me, send, deadline_ms);
    if (busy && !moved) usleep(50);
  }
  for (int p = 0; p < m->n; p++) {
    if (p == m->me) continue;
    if (st == WEFT_SUCCESS) check(r, &io[p], p, send, recv, iter);
    if (st != WEFT_SUCCESS) continue; /* a peer may still write: keep the buffers (a test leak) */
    weft__ib_dereg_mr_send(m->sc[p], io[p].smr);
    weft__ib_dereg_mr_recv(m->rc[p], io[p].rmr);
    free(io[p].sbuf);
    free(io[p].rbuf);
  }
  return st;
}

weft_status_t ib_mesh_exchange(harness_rank *r, ib_mesh *m, size_t size, int iter, int deadline_ms) {
  return ib_mesh_exchange_sizes(r, m, size, size, iter, deadline_ms);
}

void ib_mesh_close(ib_mesh *m) {
  for (int p = 0; p < IB_MESH_MAX; p++) {
    weft__ib_close_send(m->sc[p]);
    weft__ib_close_recv(m->rc[p]);
  }
  weft__ib_close_listen(m->lc);
  memset(m, 0, sizeof(*m));
}

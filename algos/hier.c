/* hier.c: host grouping and the segment schedules of the hierarchical algorithms (see
 * hier.h for the segments; all_reduce/hierarchical.c for what runs on them).
 * Grouping costs O(n * hosts) with hosts capped at WEFT__HIER_MAX_HOSTS, so the tuner can
 * afford it on every call. */
#include <math.h>
#include <string.h>
#include "algos/hier.h"
#include "algos/ring.h"
#include "lib/dtype.h"

/* Host index of hash among the first *nh known ones, appending it when new; -1 when full. */
static int host_index(uint64_t *known, int *nh, uint64_t hash) {
  for (int i = 0; i < *nh; i++)
    if (known[i] == hash) return i;
  if (*nh == WEFT__HIER_MAX_HOSTS) return -1;
  known[*nh] = hash;
  return (*nh)++;
}

weft__hier_shape weft__hier_shape_of(const weft__peer_info *peers, int n) {
  uint64_t known[WEFT__HIER_MAX_HOSTS];
  int count[WEFT__HIER_MAX_HOSTS] = {0}, nh = 0;
  weft__hier_shape s = {0, 0, 0};
  for (int r = 0; r < n; r++) {
    int h = host_index(known, &nh, peers[r].host_hash);
    if (h < 0) return s;
    count[h]++;
  }
  s.nhosts = nh;
  s.min_local = n;
  for (int h = 0; h < nh; h++) {
    if (count[h] < s.min_local) s.min_local = count[h];
    if (count[h] > s.max_local) s.max_local = count[h];
  }
  return s;
}

int weft__hier_build(const weft__peer_info *peers, int n, int rank, weft__hier *h, int *buf) {
  uint64_t known[WEFT__HIER_MAX_HOSTS];
  int count[WEFT__HIER_MAX_HOSTS] = {0}, nh = 0;
  h->host_of = buf;
  h->by_host = buf + n;
  h->host_start = buf + 2 * n;
  for (int r = 0; r < n; r++) {
    int x = host_index(known, &nh, peers[r].host_hash);
    if (x < 0) return -1;
    h->host_of[r] = x;
    if (r == rank) h->local = count[x];
    count[x]++;
  }
  h->nhosts = nh;
  h->host = h->host_of[rank];
  h->nlocal = count[h->host];
  h->min_local = n;
  h->max_local = 0;
  h->host_start[0] = 0;
  for (int x = 0; x < nh; x++) {
    h->host_start[x + 1] = h->host_start[x] + count[x];
    if (count[x] < h->min_local) h->min_local = count[x];
    if (count[x] > h->max_local) h->max_local = count[x];
    count[x] = 0;
  }
  for (int r = 0; r < n; r++) { /* a counting sort by host keeps rank order within hosts */
    int x = h->host_of[r];
    h->by_host[h->host_start[x] + count[x]++] = r;
  }
  h->host_ranks = h->by_host + h->host_start[h->host];
  return 0;
}

int weft__hier_set(const weft__hier *h, int W, int x, int l, int *out) {
  int k = 0, Lx = weft__hier_count(h, x);
  for (int b = l; b < W; b += Lx)
    for (int y = 0; y < h->nhosts; y++)
      if (b < weft__hier_count(h, y)) out[k++] = weft__hier_rank(h, y, b);
  return k;
}

/* ---- schedules ---- */
void weft__hsched_add(weft__hsched *s, const weft__hseg *seg) {
  if (s->nseg < WEFT__HSCHED_MAX_SEGS) s->seg[s->nseg++] = *seg;
}

int weft__hseg_rounds(const weft__hseg *g) {
  int steps = 0;
  if (g->kind == WEFT__HSEG_RS || g->kind == WEFT__HSEG_AG) steps = g->k - 1;
  else if (g->kind == WEFT__HSEG_FOLD) steps = g->pos == 0 ? g->k - 1 : 1;
  else steps = 1;
  return steps > 0 ? steps : 1;
}

/* Requests g may post in one round. */
static int seg_reqs(const weft__hseg *g) {
  if (g->kind == WEFT__HSEG_RS || g->kind == WEFT__HSEG_AG) return 2 * ((g->nb + g->k - 1) / g->k);
  return g->kind == WEFT__HSEG_UNFOLD && g->pos == 0 ? g->k - 1 : 1;
}

int weft__hsched_maxreq(const weft__hsched *s) {
  int m = 2, sum = 0;
  for (int i = 0; i < s->nseg; i++) {
    sum = s->seg[i].with_prev ? sum + seg_reqs(&s->seg[i]) : seg_reqs(&s->seg[i]);
    if (sum > m) m = sum;
  }
  return m;
}

/* Block b of g's region (nb blocks, split as the ring splits) in bytes; *off in bytes from
 * the buffer's start. */
static size_t block_of(const weft__hsched *s, const weft__hseg *g, int nb, int b, size_t *off) {
  weft__ring_layout l = weft__ring_layout_split(g->count, nb, 1);
  *off = (g->off + weft__ring_block_offset(&l, b)) * s->esize;
  return weft__ring_block_count(&l, b) * s->esize;
}

/* Step `step` of a ring segment: ring block sb (blocks sb, sb + k, ...) to the next member,
 * ring block rb from the previous one, each block a message, in block order on both sides. */
static void post_ring(weft__task *t, weft__hsched *s, const weft__hseg *g, int step) {
  if (step >= g->k - 1) return; /* the empty round of a one-member ring */
  int next = g->members[(g->pos + 1) % g->k], prev = g->members[(g->pos + g->k - 1) % g->k];
  int rs = g->kind == WEFT__HSEG_RS;
  int sb = rs ? weft__ring_rs_send_block(g->pos, g->k, step) : weft__ring_ag_send_block(g->pos, g->k, step);
  int rb = rs ? weft__ring_rs_recv_block(g->pos, g->k, step) : weft__ring_ag_recv_block(g->pos, g->k, step);
  const char *in = g->from_send ? (const char *)t->sendbuf : (const char *)t->recvbuf;
  /* Step 0 of a reduce-scatter sends this rank's input; later steps forward the partial
   * received in the step before, which lives in recvbuf. */
  const char *src = rs && step == 0 ? in : (const char *)t->recvbuf;
  size_t off, bytes;
  for (int b = sb; b < g->nb; b += g->k) {
    bytes = block_of(s, g, g->nb, b, &off);
    weft__round_send(&s->rounds, t, next, src + off, bytes);
  }
  for (int b = rb; b < g->nb; b += g->k) {
    bytes = block_of(s, g, g->nb, b, &off);
    weft__round_recv(&s->rounds, t, prev, (char *)t->recvbuf + off, rs ? in + off : NULL, bytes);
  }
}

static void post_fold(weft__task *t, weft__hsched *s, const weft__hseg *g, int step) {
  size_t off = g->off * s->esize, bytes = g->count * s->esize;
  const char *in = g->from_send ? (const char *)t->sendbuf : (const char *)t->recvbuf;
  char *out = (char *)t->recvbuf + off;
  if (g->kind == WEFT__HSEG_FOLD) {
    if (g->pos != 0) weft__round_send(&s->rounds, t, g->members[0], in + off, bytes);
    else if (step < g->k - 1)
      weft__round_recv(&s->rounds, t, g->members[step + 1], out, step == 0 ? in + off : out, bytes);
    return;
  }
  if (g->pos != 0) {
    weft__round_recv(&s->rounds, t, g->members[0], out, NULL, bytes);
    return;
  }
  for (int m = 1; m < g->k; m++) weft__round_send(&s->rounds, t, g->members[m], out, bytes);
}

/* The group of round i (its segments: group_seg[j] .. group_seg[j+1]-1) and the step. */
static int group_of(const weft__hsched *s, int i, int *step) {
  int j = 0;
  while (j + 1 < s->ngroup && i >= s->first[j + 1]) j++;
  *step = i - s->first[j];
  return j;
}

static void sched_post(weft__task *t, int i) {
  weft__hsched *s = t->state;
  int step, j = group_of(s, i, &step);
  for (int x = s->group_seg[j]; x < s->group_seg[j + 1]; x++) {
    const weft__hseg *g = &s->seg[x];
    if (g->kind == WEFT__HSEG_RS || g->kind == WEFT__HSEG_AG) post_ring(t, s, g, step);
    else post_fold(t, s, g, step);
  }
}

/* After the last round of an RS or a FOLD root, on each block this rank now owns fully
 * reduced and has not sent anywhere yet: the one-member copy, then WEFT_AVG. */
static void finish_seg(weft__task *t, weft__hsched *s, const weft__hseg *g, int step) {
  int reduces = g->kind == WEFT__HSEG_RS || (g->kind == WEFT__HSEG_FOLD && g->pos == 0);
  if (!reduces || step != weft__hseg_rounds(g) - 1) return;
  int rs = g->kind == WEFT__HSEG_RS, nb = rs ? g->nb : 1, stride = rs ? g->k : 1;
  for (int b = rs ? g->pos : 0; b < nb; b += stride) {
    size_t off, bytes = block_of(s, g, nb, b, &off);
    if (bytes == 0) continue;
    if (g->k == 1 && g->from_send && t->sendbuf != t->recvbuf)
      weft__mem_copy(t->mem, (char *)t->recvbuf + off, (const char *)t->sendbuf + off, bytes, 0);
    if (g->avg && t->op == WEFT_AVG)
      weft__mem_avg(t->mem, (char *)t->recvbuf + off, bytes / s->esize, t->dtype, t->comm->nranks);
  }
}

static void sched_finish(weft__task *t, int i) {
  weft__hsched *s = t->state;
  int step, j = group_of(s, i, &step);
  for (int x = s->group_seg[j]; x < s->group_seg[j + 1]; x++) finish_seg(t, s, &s->seg[x], step);
}

void weft__hsched_start(weft__hsched *s, weft__task *t, weft__req *req) {
  int total = 0;
  s->ngroup = 0;
  for (int i = 0; i < s->nseg; i++) {
    if (i > 0 && s->seg[i].with_prev) continue;
    s->group_seg[s->ngroup] = i;
    s->first[s->ngroup++] = total;
    total += weft__hseg_rounds(&s->seg[i]);
  }
  s->group_seg[s->ngroup] = s->nseg;
  s->first[s->ngroup] = total;
  s->esize = weft__dtype_size(t->dtype);
  weft__rounds_init(&s->rounds, total, req, weft__hsched_maxreq(s), sched_post, sched_finish);
}

weft_status_t weft__hsched_progress(weft__task *t) {
  weft__hsched *s = t->state;
  return weft__rounds_progress(&s->rounds, t);
}

double weft__hier_gather_cost(const weft__cost_in *c, int reduce) {
  if (c->H < 2 || c->Lmax < 2) return INFINITY;
  double H = c->H, L = c->Lmax, B = c->bytes, n = c->n;
  double net_blocks = n - c->Lmin > (H - 1) * L ? n - c->Lmin : (H - 1) * L;
  double intra = (L - 1) * c->a_in + (L - 1) / L * n * B * (c->b_in + (reduce ? c->g_in : 0));
  double inter = (H - 1) * c->a_out + net_blocks * B * (c->b_out + (reduce ? c->g_out : 0));
  return intra + inter;
}

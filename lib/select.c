/* select.c: the tuner. Picks the algorithm that runs a task, as NCCL's tuning does: every
 * candidate algorithm of the collective gets a cost from an alpha-beta model,
 *     time = steps * alpha + bytes on the critical path * beta + bytes reduced * gamma,
 * with alpha, beta and gamma from the transport in use (its .model row, measured with
 * all_reduce_perf and kept beside the transport; WEFT_TUNER_MODEL replaces rows), and the
 * cheapest wins. Candidates and their cost functions are rows of data, each in its
 * algorithm's file (lib/algo.h; the registry in algos/registry.c), not nested ifs; only rows
 * that handle the buffers' memory kind and whose needed transport capabilities every peer's
 * transport has are candidates.
 *
 * Every rank must run the same algorithm, so the choice depends only on values identical on
 * all ranks: the collective, count, datatype, memory kind, nranks, environment variables
 * that must be equal everywhere (WEFT_ALGO, WEFT_TUNER_MODEL, WEFT_CHUNK_BYTES,
 * WEFT_TRANSPORT, WEFT_TRANSPORT_CAPS), and comm-wide facts of the system view comm->topo
 * (every rank's host, exchanged at init): on one host the transport its ranks use and
 * whether they outnumber its cores; across hosts the transport of a pair on two hosts (the
 * slowest link, which the flat algorithms cross) and the host shape (hosts, fewest and most
 * ranks on one), which the hierarchical algorithms' costs (all-reduce, all-gather,
 * reduce-scatter, broadcast) read with both transports' parameters: the one within a host
 * and the one across (lib/connect.c's choice per pair reads only the system view too).
 *
 * WEFT_ALGO overrides the model with NCCL_ALGO's grammar (see weft__algo_filter_parse);
 * WEFT_TUNER_TRACE=1 logs each call's choice and why; weft-tune prints the resolved table.
 * A protocol (shm's LL or Simple, WEFT_PROTO) is its transport's choice per message size
 * (lib/proto.c), not the tuner's: it does not change which algorithm is cheapest. */
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "lib/algo.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/env.h"
#include "lib/log.h"
#include "lib/select.h"
#include "lib/status.h"
#include "topo/topo.h"
#include "transports/transport.h"

/* ---- the model's parameters: each transport's row (transports/transport.h) ---------- */
typedef weft__transport_model model_params;

/* ---- the candidates: the registry's rows (lib/algo.h) ---------------------------------
 * A collective's candidates are its rows without `wanted`, in registry order. */

/* The candidates of coll as indices into weft__algo_table; returns how many. */
static int rows_of(weft__coll_t coll, int *rows) {
  int k = 0;
  for (int i = 0; i < weft__algo_table_len && k < WEFT__SELECT_MAX_CANDIDATES; i++)
    if (weft__algo_table[i]->coll == coll && weft__algo_table[i]->wanted == NULL) rows[k++] = i;
  return k;
}

int weft__select_candidates(weft__coll_t coll, const weft__algo **out, int max) {
  int rows[WEFT__SELECT_MAX_CANDIDATES], k = rows_of(coll, rows);
  for (int i = 0; i < k && i < max; i++) out[i] = weft__algo_table[rows[i]];
  return k;
}

/* ---- WEFT_TUNER_MODEL: "shm:alpha,beta,gamma,oversub_alpha,oversub_beta;socket:..." ----
 * Each item replaces the row of the transport it names (named[t] = 1); the others keep
 * their own. */
static void parse_model(const char *spec, model_params *out, int *named) {
  for (int t = 0; weft__transports[t] != NULL; t++) out[t] = weft__transports[t]->model, named[t] = 0;
  for (const char *p = spec; p != NULL && *p != '\0';) {
    const char *end = strchr(p, ';');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char item[128];
    snprintf(item, sizeof(item), "%.*s", (int)(len < sizeof(item) - 1 ? len : sizeof(item) - 1), p);
    char *colon = strchr(item, ':');
    if (colon != NULL) *colon = '\0';
    int t = colon != NULL ? weft__transport_index(weft__transport_by_name(item)) : -1;
    model_params m;
    if (t < 0 || sscanf(colon + 1, "%lf,%lf,%lf,%lf,%lf", &m.alpha_us, &m.beta_us, &m.gamma_us,
                        &m.oversub_alpha, &m.oversub_beta) != 5) {
      if (colon != NULL) *colon = ':';
      WEFT_WARN("WEFT_TUNER_MODEL: cannot read \"%s\" (want <transport>:alpha,beta,gamma,"
                "oversub_alpha,oversub_beta, e.g. shm:6,0.1,0.05,0,2; us and us per KiB); keeping "
                "the transport's own row for it", item);
    } else {
      out[t] = m, named[t] = 1;
    }
    p = end ? end + 1 : NULL;
  }
}

const weft__transport_model *weft__select_model(const weft__transport *tr, const char *cpu,
                                                weft__model_source *source) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static char cached[256];
  static int parsed;
  static model_params params[WEFT__MAX_TRANSPORTS];
  static int named[WEFT__MAX_TRANSPORTS];
  const char *spec = weft__env_str("WEFT_TUNER_MODEL", "");
  pthread_mutex_lock(&mu);
  if (!parsed || strncmp(cached, spec, sizeof(cached)) != 0) {
    parse_model(spec, params, named);
    snprintf(cached, sizeof(cached), "%s", spec);
    parsed = 1;
  }
  pthread_mutex_unlock(&mu);
  int t = weft__transport_index(tr);
  if (t < 0) t = 0, tr = weft__transports[0];
  weft__model_source from = named[t] ? WEFT__MODEL_ENV : WEFT__MODEL_STORED;
  const model_params *m = &params[t];
  if (!named[t] && cpu != NULL && *cpu != '\0')
    for (const weft__transport_model_fit *f = tr->fits; f != NULL && f->cpu != NULL; f++)
      if (strcmp(f->cpu, cpu) == 0) from = WEFT__MODEL_FITTED, m = &f->model;
  if (source) *source = from;
  return m;
}

static void make_cost_in(const weft__select_input *in, weft__cost_in *c) {
  const model_params *m = weft__select_model(in->transport, in->cpu, NULL);
  double scale = in->oversubscribed ? m->oversub_beta : 1;
  c->a = m->alpha_us + (in->oversubscribed ? m->oversub_alpha : 0);
  c->b = m->beta_us * scale / 1024;
  c->g = m->gamma_us * scale / 1024;
  c->n = in->nranks;
  c->oversub = in->oversubscribed;
  c->bytes = (double)in->bytes;
  c->chunk = in->chunk_bytes ? (double)in->chunk_bytes : 512 * 1024;
  c->L = weft__ceil_log2(in->nranks);
  c->p2 = weft__pow2_floor(in->nranks > 0 ? in->nranks : 1);
  c->rem = in->nranks - c->p2;
  c->H = in->nhosts;
  c->Lmin = in->min_local;
  c->Lmax = in->max_local;
  if (in->nhosts < 2) return; /* spare the latency path two more table look-ups */
  const model_params *across = weft__select_model(in->transport, in->cpu, NULL);
  const weft__transport *host_tr = in->transport_in_host ? in->transport_in_host : in->transport;
  const model_params *in_host = weft__select_model(host_tr, in->cpu, NULL);
  c->a_in = in_host->alpha_us, c->b_in = in_host->beta_us / 1024, c->g_in = in_host->gamma_us / 1024;
  c->a_out = across->alpha_us, c->b_out = across->beta_us / 1024, c->g_out = across->gamma_us / 1024;
}

double weft__select_cost(const weft__algo *algo, const weft__select_input *in) {
  int rows[WEFT__SELECT_MAX_CANDIDATES], k = rows_of(in->coll, rows);
  weft__cost_in c;
  make_cost_in(in, &c);
  for (int i = 0; i < k; i++)
    if (weft__algo_table[rows[i]] == algo && algo->cost) return algo->cost(&c);
  return -1;
}

/* ---- WEFT_ALGO ------------------------------------------------------------------------ */
/* Lowercase without '_' and '-', so "Recursive_Doubling", "recursivedoubling" and
 * "all_reduce" / "allreduce" match. */
static void squash(const char *s, size_t len, char *out, size_t outlen) {
  size_t k = 0;
  for (size_t i = 0; i < len && s[i] != '\0' && k + 1 < outlen; i++) {
    if (s[i] == '_' || s[i] == '-' || isspace((unsigned char)s[i])) continue;
    out[k++] = (char)tolower((unsigned char)s[i]);
  }
  out[k] = '\0';
}

/* The collective named by name (NCCL's "allreduce", weft's "all_reduce", "bcast"), or -1. */
static int coll_by_name(const char *name) {
  if (strcmp(name, "bcast") == 0) return WEFT__COLL_BROADCAST;
  for (int c = 0; c < WEFT__NUM_COLLS; c++) {
    char s[32];
    const char *cn = weft__coll_name((weft__coll_t)c);
    squash(cn, strlen(cn), s, sizeof(s));
    if (strcmp(s, name) == 0) return c;
  }
  return -1;
}

/* Bits of coll's candidates named in the comma-separated list [p, p+len); *unknown is set
 * when a name is no candidate of coll. */
static unsigned named_mask(weft__coll_t coll, const char *p, size_t len, int *unknown) {
  int rows[WEFT__SELECT_MAX_CANDIDATES], k = rows_of(coll, rows);
  unsigned mask = 0;
  while (len > 0) {
    const char *comma = memchr(p, ',', len);
    size_t n = comma ? (size_t)(comma - p) : len;
    char want[64];
    squash(p, n, want, sizeof(want));
    int found = 0;
    for (int i = 0; i < k; i++) {
      char have[64];
      const char *name = weft__algo_table[rows[i]]->name;
      squash(name, strlen(name), have, sizeof(have));
      if (strcmp(want, have) == 0) mask |= 1u << i, found = 1;
    }
    if (!found && want[0] != '\0') *unknown = 1;
    len -= comma ? n + 1 : n;
    p += comma ? n + 1 : n;
  }
  return mask;
}

/* Applies one list ("ring,bruck" or "^ring") to coll. Returns 1 when some name was not a
 * candidate of coll. */
static int apply_list(weft__algo_filter *f, weft__coll_t coll, const char *p, size_t len) {
  int rows[WEFT__SELECT_MAX_CANDIDATES], k = rows_of(coll, rows);
  unsigned all = (1u << k) - 1;
  int exclude = len > 0 && *p == '^', unknown = 0;
  unsigned named = named_mask(coll, p + exclude, len - (size_t)exclude, &unknown);
  unsigned allowed = exclude ? all & ~named : named;
  f->allowed[coll] = allowed ? allowed : all; /* nothing left: keep every candidate */
  return unknown;
}

int weft__algo_filter_parse(const char *spec, weft__algo_filter *f) {
  memset(f, 0, sizeof(*f));
  for (int c = 0; c < WEFT__NUM_COLLS; c++) f->allowed[c] = ~0u;
  for (const char *p = spec; p != NULL && *p != '\0';) {
    const char *end = strchr(p, ';');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *colon = memchr(p, ':', len);
    if (colon == NULL) {
      /* One list for every collective: a name must fit at least one of them. */
      int fits_none = 1;
      for (int c = 0; c < WEFT__NUM_COLLS; c++) fits_none &= apply_list(f, (weft__coll_t)c, p, len);
      if (fits_none) f->bad = 1;
    } else {
      char cname[32];
      squash(p, (size_t)(colon - p), cname, sizeof(cname));
      int coll = coll_by_name(cname);
      if (coll < 0) f->bad = 1;
      else if (apply_list(f, (weft__coll_t)coll, colon + 1, len - (size_t)(colon + 1 - p))) f->bad = 1;
    }
    p = end ? end + 1 : NULL;
  }
  return !f->bad;
}

/* "ring, tree, ...; collectives: all_reduce, ..." for the warning on a bad WEFT_ALGO. */
static void valid_names(char *out, size_t len) {
  size_t n = (size_t)snprintf(out, len, "algorithms:");
  for (int i = 0; i < weft__algo_table_len && n < len; i++) {
    int seen = 0;
    for (int j = 0; j < i && !seen; j++) seen = strcmp(weft__algo_table[j]->name, weft__algo_table[i]->name) == 0;
    if (!seen) n += (size_t)snprintf(out + n, len - n, " %s", weft__algo_table[i]->name);
  }
  for (int c = 0; c < WEFT__NUM_COLLS && n < len; c++)
    n += (size_t)snprintf(out + n, len - n, "%s%s", c == 0 ? "; collectives: " : ", ",
                          weft__coll_name((weft__coll_t)c));
}

/* The process's WEFT_ALGO, parsed again only when its text changes. */
static void filter_from_env(weft__algo_filter *out) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static char cached[512];
  static int parsed;
  static weft__algo_filter filter;
  const char *spec = weft__env_str("WEFT_ALGO", "");
  pthread_mutex_lock(&mu);
  if (!parsed || strncmp(cached, spec, sizeof(cached)) != 0) {
    if (!weft__algo_filter_parse(spec, &filter)) {
      char valid[512];
      valid_names(valid, sizeof(valid));
      WEFT_WARN("WEFT_ALGO=%s names an algorithm or collective weft does not have; those names "
                "are ignored. Valid %s", spec, valid);
    }
    snprintf(cached, sizeof(cached), "%s", spec);
    parsed = 1;
  }
  *out = filter;
  pthread_mutex_unlock(&mu);
}

/* ---- resolving ------------------------------------------------------------------------ */
/* 1 when row c may run in.bytes under the model (its cap). */
static int within_cap(const weft__algo *c, const weft__select_input *in) {
  return c->max_bytes == 0 || in->bytes <= c->max_bytes;
}

/* 1 when row c handles user buffers of in's memory kind. */
static int handles(const weft__algo *c, int mem_kind) {
  return (c->spaces & WEFT__MEM_KIND_BIT(mem_kind)) != 0;
}

/* 1 when every peer's transport has what row c needs (in->caps 0: unknown, assume all). */
static int reachable(const weft__algo *c, const weft__select_input *in) {
  return (c->needs & ~(in->caps ? in->caps : ~0u)) == 0;
}

const weft__algo *weft__select_resolve(const weft__select_input *in, const weft__algo_filter *f,
                                       char *why, size_t whylen) {
  int rows[WEFT__SELECT_MAX_CANDIDATES], k = rows_of(in->coll, rows);
  unsigned allowed = f ? f->allowed[in->coll] : ~0u;
  int any_in_cap = 0, any_here = 0;
  for (int i = 0; i < k; i++) {
    const weft__algo *c = weft__algo_table[rows[i]];
    int here = handles(c, in->mem_kind) && reachable(c, in);
    if (((allowed >> i) & 1) && here) any_here = 1;
    if (((allowed >> i) & 1) && here && within_cap(c, in)) any_in_cap = 1;
  }
  const weft__algo *best = NULL;
  double best_cost = 0;
  size_t used = 0;
  weft__cost_in ci;
  if (k > 1) make_cost_in(in, &ci);
  if (why && whylen) why[0] = '\0';
  for (int i = 0; i < k; i++) {
    const weft__algo *c = weft__algo_table[rows[i]];
    int here = handles(c, in->mem_kind) && reachable(c, in);
    /* WEFT_ALGO's choice stands unless it cannot touch this memory: then the others do. */
    int ok = ((allowed >> i) & 1) || (!any_here && here), capped = !within_cap(c, in);
    double cost = c->cost && k > 1 ? c->cost(&ci) : 0;
    if (why && used < whylen && (k > 1 || !ok || !here))
      used += (size_t)snprintf(why + used, whylen - used, "%s%s %.1f us%s", used ? ", " : "",
                               c->name, cost,
                               !here ? " (not for this memory or transport)" : !ok ? " (excluded by WEFT_ALGO)"
                               : capped ? " (above its size cap)"
                               : isinf(cost) ? " (not for this host layout)" : "");
    /* A forced algorithm runs at any size; the model alone keeps to the caps. */
    if (!here || !ok || (capped && any_in_cap)) continue;
    if (best == NULL || cost < best_cost) best = c, best_cost = cost;
  }
  if (why && used == 0) snprintf(why, whylen, "the only algorithm");
  return best;
}

/* The bytes the model sees: count * size, i.e. the whole buffer, or the block per rank of an
 * all-gather or all-to-all. */
static size_t model_bytes(const weft__task *t) {
  size_t esize = weft__dtype_size(t->dtype);
  if (t->coll == WEFT__COLL_SEND || t->coll == WEFT__COLL_RECV || t->coll == WEFT__COLL_P2P_GROUP ||
      t->coll == WEFT__COLL_BARRIER || t->coll == WEFT__COLL_ALL_TO_ALLV)
    return 0;
  return t->count * esize;
}

/* Cores online, read once: glibc's sysconf(_SC_NPROCESSORS_ONLN) reads a /sys file each time,
 * which cost ~8 us per call on the latency path (0.7 -> 9 us for an 8-byte all-reduce). */
static long online_cores(void) {
  static long cores = 0;
  long c = __atomic_load_n(&cores, __ATOMIC_RELAXED);
  if (c == 0) {
    c = sysconf(_SC_NPROCESSORS_ONLN);
    __atomic_store_n(&cores, c, __ATOMIC_RELAXED);
  }
  return c;
}

/* The collectives with a two-level candidate: only they need the host shape. */
static int has_two_level(weft__coll_t coll) {
  return coll == WEFT__COLL_ALL_REDUCE || coll == WEFT__COLL_ALL_GATHER || coll == WEFT__COLL_REDUCE_SCATTER ||
         coll == WEFT__COLL_BROADCAST;
}

/* The host shape from the communicator's system view (O(hosts)); none (which rules the
 * two-level algorithms out) beyond WEFT__HIER_MAX_HOSTS hosts. */
static void host_shape(const struct weft_comm *comm, weft__select_input *in) {
  const weft__topo_system *sys = comm->topo;
  if (sys == NULL || sys->nhosts > WEFT__HIER_MAX_HOSTS) {
    in->nhosts = in->min_local = in->max_local = 0;
    return;
  }
  in->nhosts = sys->nhosts, in->min_local = comm->nranks, in->max_local = 0;
  for (int h = 0; h < sys->nhosts; h++) {
    if (sys->hosts[h].nranks < in->min_local) in->min_local = sys->hosts[h].nranks;
    if (sys->hosts[h].nranks > in->max_local) in->max_local = sys->hosts[h].nranks;
  }
}

/* The transport the core picks for two ranks on different hosts (same 0) or on one (same
 * 1) of sys, or NULL when no such pair exists: the same on every rank (lib/connect.c's
 * choice reads only the system view). */
static const weft__transport *pair_transport(const struct weft_comm *comm, int same) {
  const weft__topo_system *sys = comm->topo;
  for (int a = 0; a < comm->nranks; a++)
    for (int b = a + 1; b < comm->nranks; b++)
      if ((sys->ranks[a].host == sys->ranks[b].host) == same)
        return weft__transport_choose(sys, a, b, comm->forced_transport);
  return NULL;
}

/* Comm-wide facts, identical on all ranks, from the system view (comm->topo): the
 * transport of the links the flat algorithms cross (across hosts: the slowest), and within
 * one host for the two-level ones. */
static void comm_facts(const struct weft_comm *comm, weft__select_input *in) {
  int one_host = comm->topo->nhosts == 1;
  /* Without a pair, the registry's last transport: the one that reaches any pair. */
  in->transport = weft__transports[0];
  for (int t = 1; weft__transports[t] != NULL; t++) in->transport = weft__transports[t];
  in->transport_in_host = NULL;
  in->caps = comm->caps_all;
  in->oversubscribed = 0;
  if (!one_host) {
    in->transport = pair_transport(comm, 0);
    if (has_two_level(in->coll)) host_shape(comm, in);
    if (in->nhosts > 1) in->transport_in_host = pair_transport(comm, 1);
    return;
  }
  if (comm->nranks < 2) return;
  /* On one host every rank's peers use the same transport (shm, or socket when forced). */
  in->transport = comm->conns[(comm->rank + 1) % comm->nranks].tr;
  long cores = online_cores();
  in->oversubscribed = cores > 0 && comm->nranks > cores;
  /* The host's first rank's CPU (topo/merge.c keeps one host record per host), the same on
   * every rank even if cpuid read differently in some process. */
  in->cpu = comm->topo->hosts[0].cpu;
}

int weft__tuner_trace_on(void) {
  static int on = -1;
  int v = __atomic_load_n(&on, __ATOMIC_RELAXED);
  if (v < 0) {
    v = weft__env_long("WEFT_TUNER_TRACE", 0) != 0;
    __atomic_store_n(&on, v, __ATOMIC_RELAXED);
  }
  return v;
}

/* ---- the per-communicator cache ------------------------------------------------------
 * A small message's call must not pay for reading the environment (getenv walks environ)
 * and costing every candidate: that was ~15% of an 8-byte all-reduce's 0.5 us. So each
 * communicator reads WEFT_ALGO and its comm-wide facts once, at its first call (like NCCL,
 * which reads its variables at init: change them before creating a communicator), and
 * remembers its last choice per collective. An entry packs (bytes, memory kind, candidate
 * row + 1) into one 64-bit word, so a stream's worker thread and the caller's thread may use
 * the cache at once without a lock. WEFT_TUNER_TRACE bypasses it so every call is logged. */
struct weft__tuner_cache {
  weft__algo_filter filter;
  weft__select_input facts;                   /* transport, oversubscription, host shape */
  _Atomic uint64_t last[WEFT__NUM_COLLS];     /* (bytes << 12) | (kind << 8) | (row + 1); 0: empty */
};

static struct weft__tuner_cache *tuner_cache(struct weft_comm *comm) {
  struct weft__tuner_cache *c = atomic_load_explicit(&comm->tuner, memory_order_acquire);
  if (c != NULL) return c;
  struct weft__tuner_cache *fresh = calloc(1, sizeof(*fresh));
  if (fresh == NULL) return NULL; /* the caller resolves without a cache */
  filter_from_env(&fresh->filter);
  fresh->facts = (weft__select_input){.coll = WEFT__COLL_ALL_REDUCE, .nranks = comm->nranks,
                                      .chunk_bytes = comm->chunk_bytes};
  comm_facts(comm, &fresh->facts);
  struct weft__tuner_cache *expected = NULL;
  if (atomic_compare_exchange_strong_explicit(&comm->tuner, &expected, fresh, memory_order_acq_rel,
                                              memory_order_acquire))
    return fresh;
  free(fresh); /* another thread won */
  return expected;
}

void weft__select_comm_free(struct weft_comm *comm) {
  free(atomic_exchange_explicit(&comm->tuner, NULL, memory_order_acq_rel));
}

/* The row of weft__algo_table holding algo, or -1. */
static int row_of(const weft__algo *algo) {
  for (int i = 0; i < weft__algo_table_len; i++)
    if (weft__algo_table[i] == algo) return i;
  return -1;
}

static uint64_t cache_key(size_t bytes, int mem_kind) {
  return ((uint64_t)bytes << 4 | (uint64_t)mem_kind) << 8;
}

/* The last choice for (bytes, mem_kind) of coll, or NULL. */
static const weft__algo *cached(struct weft__tuner_cache *c, weft__coll_t coll, size_t bytes, int mem_kind) {
  uint64_t e = atomic_load_explicit(&c->last[coll], memory_order_relaxed);
  return e != 0 && (e & ~(uint64_t)0xff) == cache_key(bytes, mem_kind) ? weft__algo_table[(e & 0xff) - 1] : NULL;
}

static const weft__algo *resolve_cached(struct weft__tuner_cache *c, weft__select_input *in) {
  uint64_t key = cache_key(in->bytes, in->mem_kind);
  const weft__algo *a = weft__select_resolve(in, &c->filter, NULL, 0);
  int row = a != NULL ? row_of(a) : -1;
  if (row >= 0 && row < 255 && (uint64_t)in->bytes < (UINT64_C(1) << 52) && in->mem_kind < 16)
    atomic_store_explicit(&c->last[in->coll], key | (uint64_t)(row + 1), memory_order_relaxed);
  return a;
}

/* Per collective, its row with `wanted` (at most one; the direct algorithm). */
static const weft__algo *wanted_rows[WEFT__NUM_COLLS];

/* Filled when the library loads, so the latency path reads a plain table. */
__attribute__((constructor)) static void find_wanted_rows(void) {
  for (int i = 0; i < weft__algo_table_len; i++)
    if (weft__algo_table[i]->wanted != NULL && wanted_rows[weft__algo_table[i]->coll] == NULL)
      wanted_rows[weft__algo_table[i]->coll] = weft__algo_table[i];
}

/* The latency path of every call: the wanted row only where the communicator holds
 * registrations (its precondition), then the tuner cache's hit, inline. The cache exists only
 * where WEFT_TUNER_TRACE is off (weft__select_modelled), so a hit skips no trace line.
 * Callgrind, 2 ranks, 8-byte broadcasts: 109 instructions a call -> 56. */
const weft__algo *weft__select_algo(const weft__task *t) {
  if ((unsigned)t->coll >= WEFT__NUM_COLLS) return NULL;
  struct weft_comm *comm = t->comm;
  const weft__algo *w = wanted_rows[t->coll];
  if (w != NULL && weft__comm_has_registrations(comm) && w->wanted(t) && handles(w, (int)t->mem->kind) &&
      (w->needs & ~comm->caps_all) == 0)
    return w;
  struct weft__tuner_cache *cache = atomic_load_explicit(&comm->tuner, memory_order_acquire);
  const weft__algo *hit = cache != NULL ? cached(cache, t->coll, model_bytes(t), (int)t->mem->kind) : NULL;
  return hit != NULL ? hit : weft__select_modelled(t);
}

const weft__algo *weft__select_modelled(const weft__task *t) {
  if ((unsigned)t->coll >= WEFT__NUM_COLLS) return NULL;
  struct weft_comm *comm = t->comm;
  struct weft__tuner_cache *cache = weft__tuner_trace_on() ? NULL : tuner_cache(comm);
  if (cache != NULL) {
    size_t bytes = model_bytes(t);
    const weft__algo *hit = cached(cache, t->coll, bytes, (int)t->mem->kind);
    if (hit != NULL) return hit;
    weft__select_input in = cache->facts;
    in.coll = t->coll;
    in.bytes = bytes;
    in.mem_kind = (int)t->mem->kind;
    return resolve_cached(cache, &in);
  }
  weft__select_input in = {.coll = t->coll, .nranks = comm->nranks, .bytes = model_bytes(t),
                           .chunk_bytes = comm->chunk_bytes, .mem_kind = (int)t->mem->kind};
  comm_facts(comm, &in);
  weft__algo_filter f;
  filter_from_env(&f);
  if (!weft__tuner_trace_on()) return weft__select_resolve(&in, &f, NULL, 0);
  char why[512], what[160];
  const weft__algo *a = weft__select_resolve(&in, &f, why, sizeof(why));
  char hosts[64] = "";
  if (in.nhosts > 1)
    snprintf(hosts, sizeof(hosts), " (%d hosts, %d-%d ranks each)", in.nhosts, in.min_local, in.max_local);
  char memory[48] = "";
  if (t->mem->kind != WEFT__MEM_HOST) snprintf(memory, sizeof(memory), " in %s memory", t->mem->name);
  weft__model_source from;
  weft__select_model(in.transport, in.cpu, &from);
  char row[96] = "";
  if (from != WEFT__MODEL_STORED)
    snprintf(row, sizeof(row), " (row %s%s)", from == WEFT__MODEL_ENV ? "of WEFT_TUNER_MODEL" : "fitted on ",
             from == WEFT__MODEL_ENV ? "" : in.cpu);
  weft__log_write(WEFT__LOG_INFO, "tuner: %s, %zu B%s, %d ranks over %s%s%s%s: %s (%s)",
                  weft__task_describe(t, what, sizeof(what)), in.bytes, memory, in.nranks,
                  in.transport->name, row, hosts,
                  in.oversubscribed ? " (more ranks than cores)" : "", a ? a->name : "none", why);
  return a;
}

/* ---- the public query --------------------------------------------------------------- */

/* The collective a name means: weft's own names, plus nccl-tests' spellings. */
static int coll_from_name(const char *name, weft__coll_t *out) {
  if (strcmp(name, "alltoall") == 0) name = "all_to_all";
  if (strcmp(name, "sendrecv") == 0) name = "send";
  for (int c = 0; c < WEFT__NUM_COLLS; c++) {
    if (strcmp(name, weft__coll_name((weft__coll_t)c)) == 0) {
      *out = (weft__coll_t)c;
      return 1;
    }
  }
  return 0;
}

weft_status_t weft_get_algorithm(weft_comm_t comm, const char *collective, size_t count,
                                 weft_datatype_t datatype, const char **name) {
  if (comm == NULL || collective == NULL || name == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_get_algorithm: NULL argument");
  weft__task t;
  memset(&t, 0, sizeof(t));
  if (!coll_from_name(collective, &t.coll))
    return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT, "weft_get_algorithm: unknown collective \"%s\"",
                       collective);
  if (!weft__dtype_valid(datatype))
    return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT, "weft_get_algorithm: invalid datatype %d",
                       (int)datatype);
  WEFT_TRY(weft__comm_wait_ready(comm));
  t.comm = comm;
  t.count = count;
  t.dtype = datatype;
  t.root = t.peer = -1;
  t.mem = &weft__mem_host;
  const weft__algo *a = weft__select_modelled(&t); /* direct depends on the buffers */
  *name = a != NULL ? a->name : "none";
  return WEFT_SUCCESS;
}

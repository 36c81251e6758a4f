/* weft_tune_measure.c: `weft-tune --measure` fits the tuner's alpha-beta-gamma model
 * (lib/select.c) to the machine it runs on and prints it as a WEFT_TUNER_MODEL value.
 *
 * Why: the stored table in select.c was fitted on one 2-core VM; a user's machine (more
 * cores, another memory system, a real NIC) has other constants, and the crossovers
 * between algorithms move with them. NCCL likewise derives its tuning from measured link
 * bandwidths and latencies; here we measure the three constants directly.
 *
 * How: for each registered transport (WEFT_TRANSPORT=<name>, transports/registry.c) that
 * runs on this host, real ranks started by weftrun next to this program run
 * all_reduce_perf / all_gather_perf with a fixed WEFT_ALGO and blocking calls (-z 2 -L 1),
 * 3 launches each, and the median of their p50 times is solved against the same cost
 * functions select.c uses (ag_ring, ar_ring, ar_recursive_doubling, rb_cost):
 *     ring all-reduce of 8 B       t = 2 (n-1) l                          -> l, a step of 8 B
 *     ring all-gather, block b     t = ceil(b/chunk) (n-1) l + (n-1) b beta       -> beta
 *     ring all-reduce of B bytes   t = ceil(B/(n chunk)) 2 (n-1) l
 *                                      + 2 (n-1)/n B beta + (n-1)/n B gamma       -> gamma
 *     all-reduce, all-gather and reduce-scatter, 4 KiB .. 1 MiB, each by its log-depth
 *     algorithms (all-reduce: recursive doubling and Rabenseifner) and by the ring: alpha
 *     is the value whose choices lose least (fit_alpha_choices)
 * with n = 2 ranks; then the all-gather and the choices with 2 x cores ranks give the
 * oversubscription terms (for the registry's first transport, the one ranks of a host
 * use; the others keep 0 and 1): oversub_beta = beta' / beta, oversub_alpha = alpha' - alpha.
 * beta and gamma are printed per KiB, as WEFT_TUNER_MODEL takes them. Takes ~40 s on 2 cores. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "lib/cpu_key.h"
#include "lib/select.h"
#include "tools/weft_tune_measure.h"
#include "transports/transport.h"

#define LAUNCHES 3
#define BIG_BYTES ((size_t)4 << 20) /* past the model's whole-message caps, ring only */

typedef struct {
  char bindir[PATH_MAX]; /* where weftrun and the perf programs are */
  size_t chunk;
  const char *transport; /* a registered transport's name (WEFT_TRANSPORT) */
  char reason[512];      /* what the ranks of the last failed launch said */
  char why[1024];        /* that launch and its reason */
} tune_ctx;

/* The directory of this executable, where `make` and `make install` put the perf tools. */
static int find_bindir(char *out, size_t len) {
  ssize_t k = readlink("/proc/self/exe", out, len - 1);
  if (k <= 0) return -1;
  out[k] = '\0';
  char *slash = strrchr(out, '/');
  if (!slash) return -1;
  *slash = '\0';
  return 0;
}

/* The sizes and weft p50_us of every result of a perf program's -J document (nccl-tests'
 * JSON, weft's figures under "weft"), up to MAX_ROWS; -1 when none, or when a result lacks
 * its p50 or a half of it has wrong elements. */
#define MAX_ROWS 16
typedef struct {
  int n;
  double bytes[MAX_ROWS], p50[MAX_ROWS];
} perf_rows;

static int read_rows(const char *path, perf_rows *out) {
  out->n = 0;
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  static char doc[1 << 20];
  size_t len = fread(doc, 1, sizeof doc - 1, f);
  fclose(f);
  doc[len] = '\0';
  for (char *r = strstr(doc, "{\"size\":"); r != NULL && out->n < MAX_ROWS;) {
    char *next = strstr(r + 1, "{\"size\":");
    if (next) *next = '\0'; /* this result's text only */
    const char *w = strstr(r, "\"weft\":{\"algorithm\":");
    const char *p = w ? strstr(w, "\"p50_us\":") : NULL;
    int exact = 0;
    for (const char *q = r; (q = strstr(q, "\"nwrong\":")) != NULL; q++) exact += strtod(q + 9, NULL) == 0;
    if (!p || exact != 2) return -1;
    out->bytes[out->n] = strtod(r + 8, NULL);
    out->p50[out->n++] = strtod(p + 9, NULL);
    if (next) *next = '{';
    r = next;
  }
  return out->n > 0 ? 0 : -1;
}

/* Why a launch of prog failed, from its ranks' stderr at path: the first line a rank wrote
 * as prog ("all_reduce_perf: rank 0: ... failed: ..."), else the last line; "" if none. */
static void failure_reason(const char *path, const char *prog, char *why, size_t len) {
  why[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[512];
  size_t plen = strlen(prog);
  int own = 0;
  while (!own && fgets(line, sizeof line, f)) {
    if (line[0] == '\n') continue;
    own = strncmp(line, prog, plen) == 0 && line[plen] == ':';
    snprintf(why, len, "%.*s", (int)strcspn(line, "\n"), line);
  }
  fclose(f);
}

/* One launch: weftrun -n N PROG -b LO -e HI -f 2 -z 2 -L 1 ... with WEFT_ALGO=algo (blocking
 * calls, no barrier between them; -L: p50 of single calls), its rows in out. Returns 0, or
 * -1 with the reason in c->reason: the ranks' stderr is kept, not shown, since a transport
 * that cannot run here (ib without a device) fails every launch and its ranks' warnings
 * would bury the result. */
static int launch(tune_ctx *c, const char *prog, const char *algo, int n, size_t lo, size_t hi,
                  perf_rows *out) {
  char dir[] = "/tmp/weft-tune-XXXXXX", json[sizeof dir + 16], err[sizeof dir + 16];
  if (mkdtemp(dir) == NULL) return -1;
  snprintf(json, sizeof json, "%s/row.json", dir);
  snprintf(err, sizeof err, "%s/stderr", dir);
  char weftrun[PATH_MAX + 16], exe[PATH_MAX + 32], np[16], from[32], to[32], iters[16];
  snprintf(weftrun, sizeof weftrun, "%s/weftrun", c->bindir);
  snprintf(exe, sizeof exe, "%s/%s", c->bindir, prog);
  snprintf(np, sizeof np, "%d", n);
  snprintf(from, sizeof from, "%zu", lo);
  snprintf(to, sizeof to, "%zu", hi);
  snprintf(iters, sizeof iters, "%d", hi < 65536 ? 300 : lo < hi ? 100 : 20);
  fflush(NULL); /* else the child's freopen writes out a copy of what stdout still buffers */
  pid_t pid = fork();
  if (pid == 0) {
    setenv("WEFT_ALGO", algo, 1);
    setenv("WEFT_TRANSPORT", c->transport, 1);
    unsetenv("WEFT_TUNER_MODEL");
    if (!freopen("/dev/null", "w", stdout) || !freopen(err, "w", stderr)) _exit(127);
    /* bound as the perf programs run by default and as make bench runs them (rank r on core
     * r mod cores): unbound, 2 ranks sometimes shared a core and the crossover moved */
    execl(weftrun, "weftrun", "-n", np, "--bind-to", "core", exe, "-b", from, "-e", to, "-f", "2", "-z", "2",
          "-L", "1", "-n", iters, "-w", "5", "-J", json, (char *)NULL);
    _exit(127);
  }
  int status = 0, rc = -1;
  if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0)
    rc = read_rows(json, out);
  if (rc < 0) failure_reason(err, prog, c->reason, sizeof c->reason);
  unlink(json);
  unlink(err);
  rmdir(dir);
  return rc;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int k) {
  qsort(v, (size_t)k, sizeof v[0], cmp_double);
  return v[k / 2];
}

/* Per size of lo, 2 lo, .. hi: the median p50 of LAUNCHES launches of prog with WEFT_ALGO set
 * to each of the k names in algo, into out[0 .. k-1]; -1 when any failed, with the launch and
 * its reason in c->why. The algorithms alternate launch by launch, so a slow spell of the
 * machine falls on all of them. */
#define MAX_ALGOS 3
static int median_rows(tune_ctx *c, const char *prog, int n, size_t lo, size_t hi, const char *const *algo,
                       int k, perf_rows *out) {
  perf_rows runs[MAX_ALGOS][LAUNCHES];
  for (int i = 0; i < LAUNCHES; i++)
    for (int j = 0; j < k; j++)
      if (launch(c, prog, algo[j], n, lo, hi, &runs[j][i]) < 0 || runs[j][i].n != runs[0][0].n) {
        snprintf(c->why, sizeof c->why, "weftrun -n %d %s -b %zu -e %zu (WEFT_TRANSPORT=%s WEFT_ALGO=%s) failed%s%s",
                 n, prog, lo, hi, c->transport, algo[j], c->reason[0] ? ": " : "", c->reason);
        return -1;
      }
  for (int j = 0; j < k; j++) {
    out[j].n = runs[0][0].n;
    for (int r = 0; r < out[j].n; r++) {
      double v[LAUNCHES];
      for (int i = 0; i < LAUNCHES; i++) v[i] = runs[j][i].p50[r];
      out[j].bytes[r] = runs[0][0].bytes[r];
      out[j].p50[r] = median(v, LAUNCHES);
    }
  }
  return 0;
}

/* The median p50 of one size with WEFT_ALGO=ring; -1 when a launch failed (c->why). */
static double median_p50(tune_ctx *c, const char *prog, int n, size_t bytes) {
  static const char *const ring[] = {"ring"};
  perf_rows rows;
  if (median_rows(c, prog, n, bytes, bytes, ring, 1, &rows)) return -1;
  return rows.p50[0];
}

static double ceil_div(double x, double y) { return ceil(x / y); }

/* The latency of one step of an 8-byte message (us) and beta (us per byte) on n ranks, from
 * the 8-byte all-reduce and the all-gather (nccl-tests sizes an all-gather by its whole
 * receive buffer: block = S / n); the latency takes the steps' share out of the all-gather's
 * and all-reduce's time, alpha itself comes from fit_alpha_choices. */
static int fit_step_beta(tune_ctx *c, int n, double *step, double *beta) {
  double t8 = median_p50(c, "all_reduce_perf", n, 8);
  if (t8 < 0) return -1;
  size_t block = BIG_BYTES / (size_t)n;
  double tag = median_p50(c, "all_gather_perf", n, block * (size_t)n);
  if (tag < 0) return -1;
  *step = t8 / (2.0 * (n - 1));
  double steps = ceil_div((double)block, (double)c->chunk) * (n - 1);
  *beta = fmax((tag - steps * *step) / ((n - 1) * (double)block), 1e-9);
  printf("#   %-6s %d ranks: all_reduce 8 B %8.2f us -> %.3f us a step; all_gather %zu B %9.1f us -> beta %.4f us/KiB\n",
         c->transport, n, t8, *step, block * (size_t)n, tag, *beta * 1024);
  return 0;
}

/* gamma (us per byte) on 2 ranks, given the 8-byte step (us) and beta. */
static int fit_gamma(tune_ctx *c, double step, double beta, double *gamma) {
  double B = (double)BIG_BYTES, n = 2;
  double t = median_p50(c, "all_reduce_perf", 2, BIG_BYTES);
  if (t < 0) return -1;
  double rest = t - ceil_div(B, n * (double)c->chunk) * 2 * (n - 1) * step - 2 * (n - 1) / n * B * beta;
  *gamma = fmax(rest / ((n - 1) / n * B), 0.0);
  printf("#   %-6s 2 ranks: all_reduce %zu B %9.1f us -> gamma %.4f us/KiB\n", c->transport, BIG_BYTES, t,
         *gamma * 1024);
  return 0;
}

/* One choice the tuner makes by size among the algorithms of a collective, as the perf
 * program measures it. The model sees an all-gather's and a reduce-scatter's block per
 * rank, the program's size column their whole buffer. */
typedef struct {
  const char *prog;
  weft__coll_t coll;
  const char *algo[MAX_ALGOS]; /* the log-depth ones first, then the ring; NULL ends it */
  int per_rank;                /* model bytes = size / n */
} tuner_choice;

/* Rabenseifner is in the all-reduce's choice because the model picks it between recursive
 * doubling and the ring on 4 or more ranks: fitted without it, alpha put it where it lost. */
static const tuner_choice choices[] = {
    {"all_reduce_perf", WEFT__COLL_ALL_REDUCE, {"recursive_doubling", "rabenseifner", "ring"}, 0},
    {"all_gather_perf", WEFT__COLL_ALL_GATHER, {"bruck", "ring"}, 1},
    {"reduce_scatter_perf", WEFT__COLL_REDUCE_SCATTER, {"recursive_doubling", "ring"}, 1},
};
#define NCHOICES (sizeof choices / sizeof choices[0])

/* How many algorithms ch names. */
static int choice_len(const tuner_choice *ch) {
  int k = 0;
  while (k < MAX_ALGOS && ch->algo[k] != NULL) k++;
  return k;
}

/* The row of coll named name, or NULL. */
static const weft__algo *algo_row(weft__coll_t coll, const char *name) {
  const weft__algo *rows[WEFT__SELECT_MAX_CANDIDATES];
  int k = weft__select_candidates(coll, rows, WEFT__SELECT_MAX_CANDIDATES);
  for (int i = 0; i < k; i++)
    if (strcmp(rows[i]->name, name) == 0) return rows[i];
  return NULL;
}

/* Makes alpha, beta, gamma (us, us per byte) c's transport's model for select.c's cost
 * functions, through WEFT_TUNER_MODEL (its only way in); unset it when done. */
static void use_model(const tune_ctx *c, double a, double b, double g) {
  char spec[256];
  snprintf(spec, sizeof spec, "%s:%.17g,%.17g,%.17g,0,1", c->transport, a, b * 1024, g * 1024);
  setenv("WEFT_TUNER_MODEL", spec, 1);
}

/* 1 when the model may run ch's algorithm i at model bytes (its row exists; its cap). */
static int within_cap(const tuner_choice *ch, int i, size_t bytes) {
  const weft__algo *row = algo_row(ch->coll, ch->algo[i]);
  return row != NULL && (row->max_bytes == 0 || bytes <= row->max_bytes);
}

/* Which of the algorithms of ch (an index into ch->algo) the model in use (use_model) picks
 * on n ranks for model bytes, from select.c's own cost functions and caps, among those within
 * their caps; -1 when fewer than two are (no choice to make). Ties go to the earlier name. */
static int model_pick(const tune_ctx *c, const tuner_choice *ch, int n, size_t bytes) {
  weft__select_input in = {.coll = ch->coll, .nranks = n, .bytes = bytes,
                           .transport = weft__transport_by_name(c->transport), .chunk_bytes = c->chunk,
                           .nhosts = 1, .min_local = n, .max_local = n};
  int pick = -1, within = 0;
  double least = INFINITY;
  for (int i = 0; i < choice_len(ch); i++) {
    if (!within_cap(ch, i, bytes)) continue;
    double cost = weft__select_cost(algo_row(ch->coll, ch->algo[i]), &in);
    within++;
    if (cost < least) least = cost, pick = i;
  }
  return within < 2 ? -1 : pick;
}

/* alpha (us) on n ranks, given beta and gamma (us per byte): the value whose choices lose
 * least time on this machine. Each choice's two algorithms run at CROSS_LO, 2 CROSS_LO, ..
 * CROSS_HI (launches alternating); for alpha on a log grid the model picks one per size,
 * and a pick costs the measured time beyond the faster one's, relative to it, summed over
 * sizes and choices. alpha is the geometric middle of the grid's least-loss span.
 * Why not the 8-byte latency: a step of a message above the LL threshold (lib/proto.h)
 * costs several times one of 8 B, and alpha decides only where latency meets bandwidth; on
 * the family-26 EPYC VM (2026-11-29) the 8-byte alpha (0.5 us) put the 2-rank all-reduce's
 * ring from 8 KiB, where it ran 2-4x slower than recursive doubling up to 32 KiB. Why every
 * choice and not one crossover: near a crossover the two algorithms differ by less than
 * launches do (the 2-rank all-reduce's first size with the ring ahead moved 23 KiB -
 * 870 KiB between runs), and a size counts by what a wrong pick there costs. */
#define CROSS_LO ((size_t)4 << 10)
#define CROSS_HI ((size_t)1 << 20)
#define ALPHA_GRID 241 /* 0.1 .. 1000 us, 60 points a decade */
static int fit_alpha_choices(tune_ctx *c, int n, double b, double g, double *alpha) {
  perf_rows t[NCHOICES][MAX_ALGOS];
  for (size_t k = 0; k < NCHOICES; k++)
    if (median_rows(c, choices[k].prog, n, CROSS_LO, CROSS_HI, choices[k].algo, choice_len(&choices[k]), t[k]))
      return -1;
  double loss[ALPHA_GRID], least = INFINITY;
  for (int i = 0; i < ALPHA_GRID; i++) {
    use_model(c, 0.1 * pow(10, i / 60.0), b, g);
    loss[i] = 0;
    for (size_t k = 0; k < NCHOICES; k++)
      for (int r = 0; r < t[k][0].n; r++) {
        size_t bytes = (size_t)t[k][0].bytes[r] / (choices[k].per_rank ? (size_t)n : 1);
        int pick = model_pick(c, &choices[k], n, bytes);
        if (pick < 0) continue;
        double best = INFINITY;
        for (int j = 0; j < choice_len(&choices[k]); j++)
          if (within_cap(&choices[k], j, bytes)) best = fmin(best, t[k][j].p50[r]);
        loss[i] += (t[k][pick].p50[r] - best) / best;
      }
    least = fmin(least, loss[i]);
  }
  unsetenv("WEFT_TUNER_MODEL");
  int lo = 0, hi = ALPHA_GRID - 1;
  while (loss[lo] > least + 1e-9) lo++;
  hi = lo;
  while (hi + 1 < ALPHA_GRID && loss[hi + 1] <= least + 1e-9) hi++;
  *alpha = 0.1 * pow(10, (lo + hi) / 120.0);
  printf("#   %-6s %d ranks: all_reduce, all_gather, reduce_scatter %zu B-%zu B, log-depth against ring: "
         "alpha %.3g-%.3g us lose least (%.2f) -> alpha %.3f us%s\n",
         c->transport, n, CROSS_LO, CROSS_HI, 0.1 * pow(10, lo / 60.0), 0.1 * pow(10, hi / 60.0), least, *alpha,
         lo == 0 ? " (or less)" : hi == ALPHA_GRID - 1 ? " (or more)" : "");
  return 0;
}

/* One transport's five parameters, as "alpha,beta,gamma,oversub_alpha,oversub_beta". The
 * oversubscription terms are measured for the host's own transport (oversub) with 2 x cores
 * ranks where that is at most MAX_OVERSUB_RANKS; otherwise they stay the transport's own. */
#define MAX_OVERSUB_RANKS 8
static int fit_transport(tune_ctx *c, const weft__transport *tr, int cores, int oversub, char *out, size_t len) {
  double step, a, b, g, step2, a2, b2;
  if (fit_step_beta(c, 2, &step, &b) || fit_gamma(c, step, b, &g) || fit_alpha_choices(c, 2, b, g, &a)) return -1;
  double oa = oversub ? tr->model.oversub_alpha : 0, ob = oversub ? tr->model.oversub_beta : 1;
  int over = 2 * cores;
  if (oversub && over <= MAX_OVERSUB_RANKS) {
    if (fit_step_beta(c, over, &step2, &b2)) return -1;
    ob = fmax(b2 / b, 1);
    if (fit_alpha_choices(c, over, b * ob, g * ob, &a2)) return -1;
    oa = fmax(a2 - a, 0);
  } else if (oversub) {
    printf("#   %-6s more ranks than cores: %d ranks would take too long; keeping its terms %g, %g\n", c->transport,
           over, oa, ob);
  }
  snprintf(out, len, "%s:%.3g,%.3g,%.3g,%.3g,%.3g", c->transport, a, b * 1024, g * 1024, oa, ob);
  return 0;
}

int weft_tune_measure(size_t chunk_bytes) {
  tune_ctx c = {.chunk = chunk_bytes};
  if (find_bindir(c.bindir, sizeof c.bindir)) {
    fprintf(stderr, "weft-tune: cannot find my own directory (/proc/self/exe)\n");
    return 1;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  printf("# weft-tune --measure: all-reduce / all-gather p50 of blocking calls, median of %d launches,\n"
         "# %ld online cores, chunk %zu B; perf programs from %s\n",
         LAUNCHES, cores, chunk_bytes, c.bindir);
  char model[1024] = "";
  size_t at = 0;
  for (int t = 0; weft__transports[t] != NULL; t++) {
    char row[128];
    c.transport = weft__transports[t]->name;
    if (fit_transport(&c, weft__transports[t], (int)cores, t == 0, row, sizeof row)) {
      if (t == 0) { /* the host's own transport must run */
        fprintf(stderr, "weft-tune: %s/%s\n", c.bindir, c.why);
        return 1;
      }
      printf("# %s does not run on this host (%s): it keeps its own row\n", c.transport, c.why);
      continue;
    }
    at += (size_t)snprintf(model + at, sizeof model - at, "%s%s", at ? ";" : "", row);
    /* The host's own transport: the same numbers as a row fitted to this CPU kind, to keep
     * in the transport's .fits (transports/transport.h) once several fits agree. */
    const char *cpu = weft__cpu_key(), *nums = strchr(row, ':');
    if (t == 0 && *cpu != '\0' && nums != NULL)
      printf("# as %s's row fitted to this CPU kind: {\"%s\", {%s}}\n", c.transport, cpu, nums + 1);
  }
  printf("export WEFT_TUNER_MODEL=\"%s\"\n", model);
  return 0;
}

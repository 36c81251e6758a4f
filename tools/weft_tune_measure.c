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
 * all_reduce_perf / all_gather_perf with WEFT_ALGO=ring and blocking calls (-z 2 -L 1), 3
 * launches each, and the median of their p50 times is solved against the same cost
 * functions select.c uses (ag_ring, ar_ring):
 *     ring all-reduce of 8 B       t = 2 (n-1) alpha                     -> alpha
 *     ring all-gather, block b     t = ceil(b/chunk) (n-1) alpha + (n-1) b beta   -> beta
 *     ring all-reduce of B bytes   t = ceil(B/(n chunk)) 2 (n-1) alpha
 *                                      + 2 (n-1)/n B beta + (n-1)/n B gamma       -> gamma
 * with n = 2 ranks; then the same two first fits with 2 x cores ranks give the
 * oversubscription terms (for the registry's first transport, the one ranks of a host
 * use; the others keep 0 and 1): oversub_alpha = alpha' - alpha, oversub_beta = beta' / beta.
 * beta and gamma are printed per KiB, as WEFT_TUNER_MODEL takes them. Takes ~1 minute. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
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

/* The weft p50_us of the one result of a perf program's -J document (nccl-tests' JSON,
 * weft's figures under "weft"); -1 when missing or when a half has wrong elements. */
static double read_p50(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  static char doc[1 << 20];
  size_t n = fread(doc, 1, sizeof doc - 1, f);
  fclose(f);
  doc[n] = '\0';
  const char *w = strstr(doc, "\"weft\":{\"algorithm\":");
  const char *p = w ? strstr(w, "\"p50_us\":") : NULL;
  int exact = 0;
  for (const char *q = doc; (q = strstr(q, "\"nwrong\":")) != NULL; q++) exact += strtod(q + 9, NULL) == 0;
  return p && exact == 2 ? strtod(p + 9, NULL) : -1;
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

/* One launch: weftrun -n N PROG -b S -e S -z 2 -L 1 ... with WEFT_ALGO=ring (blocking calls,
 * no barrier between them; -L: p50 of single calls). Returns p50 us, or -1 with the reason in
 * c->reason: the ranks' stderr is kept, not shown, since a transport that cannot run here (ib
 * without a device) fails every launch and its ranks' warnings would bury the result. */
static double launch(tune_ctx *c, const char *prog, int n, size_t bytes) {
  char dir[] = "/tmp/weft-tune-XXXXXX", json[sizeof dir + 16], err[sizeof dir + 16];
  if (mkdtemp(dir) == NULL) return -1;
  snprintf(json, sizeof json, "%s/row.json", dir);
  snprintf(err, sizeof err, "%s/stderr", dir);
  char weftrun[PATH_MAX + 16], exe[PATH_MAX + 32], np[16], size[32], iters[16];
  snprintf(weftrun, sizeof weftrun, "%s/weftrun", c->bindir);
  snprintf(exe, sizeof exe, "%s/%s", c->bindir, prog);
  snprintf(np, sizeof np, "%d", n);
  snprintf(size, sizeof size, "%zu", bytes);
  snprintf(iters, sizeof iters, "%d", bytes < 65536 ? 300 : 20);
  fflush(NULL); /* else the child's freopen writes out a copy of what stdout still buffers */
  pid_t pid = fork();
  if (pid == 0) {
    setenv("WEFT_ALGO", "ring", 1);
    setenv("WEFT_TRANSPORT", c->transport, 1);
    unsetenv("WEFT_TUNER_MODEL");
    if (!freopen("/dev/null", "w", stdout) || !freopen(err, "w", stderr)) _exit(127);
    execl(weftrun, "weftrun", "-n", np, "--bind-to", "none", exe, "-b", size, "-e", size, "-z", "2",
          "-L", "1", "-n", iters, "-w", "5", "-J", json, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  double p50 = -1;
  if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0)
    p50 = read_p50(json);
  if (p50 < 0) failure_reason(err, prog, c->reason, sizeof c->reason);
  unlink(json);
  unlink(err);
  rmdir(dir);
  return p50;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median p50 of LAUNCHES launches; -1 when any failed, with the launch and its reason in
 * c->why. */
static double median_p50(tune_ctx *c, const char *prog, int n, size_t bytes) {
  double v[LAUNCHES];
  for (int i = 0; i < LAUNCHES; i++) {
    v[i] = launch(c, prog, n, bytes);
    if (v[i] < 0) {
      snprintf(c->why, sizeof c->why, "weftrun -n %d %s -b %zu (WEFT_TRANSPORT=%s) failed%s%s", n, prog, bytes,
               c->transport, c->reason[0] ? ": " : "", c->reason);
      return -1;
    }
  }
  qsort(v, LAUNCHES, sizeof v[0], cmp_double);
  return v[LAUNCHES / 2];
}

static double ceil_div(double x, double y) { return ceil(x / y); }

/* alpha (us) and beta (us per byte) on n ranks, from the 8-byte all-reduce and the
 * all-gather (nccl-tests sizes an all-gather by its whole receive buffer: block = S / n). */
static int fit_alpha_beta(tune_ctx *c, int n, double *alpha, double *beta) {
  double t8 = median_p50(c, "all_reduce_perf", n, 8);
  if (t8 < 0) return -1;
  size_t block = BIG_BYTES / (size_t)n;
  double tag = median_p50(c, "all_gather_perf", n, block * (size_t)n);
  if (tag < 0) return -1;
  *alpha = t8 / (2.0 * (n - 1));
  double steps = ceil_div((double)block, (double)c->chunk) * (n - 1);
  *beta = fmax((tag - steps * *alpha) / ((n - 1) * (double)block), 1e-9);
  printf("#   %-6s %d ranks: all_reduce 8 B %8.2f us -> alpha %.3f us; all_gather %zu B %9.1f us -> beta %.4f us/KiB\n",
         c->transport, n, t8, *alpha, block * (size_t)n, tag, *beta * 1024);
  return 0;
}

/* gamma (us per byte) on 2 ranks, given alpha and beta. */
static int fit_gamma(tune_ctx *c, double alpha, double beta, double *gamma) {
  double B = (double)BIG_BYTES, n = 2;
  double t = median_p50(c, "all_reduce_perf", 2, BIG_BYTES);
  if (t < 0) return -1;
  double rest = t - ceil_div(B, n * (double)c->chunk) * 2 * (n - 1) * alpha - 2 * (n - 1) / n * B * beta;
  *gamma = fmax(rest / ((n - 1) / n * B), 0.0);
  printf("#   %-6s 2 ranks: all_reduce %zu B %9.1f us -> gamma %.4f us/KiB\n", c->transport, BIG_BYTES, t,
         *gamma * 1024);
  return 0;
}

/* One transport's five parameters, as "alpha,beta,gamma,oversub_alpha,oversub_beta". */
static int fit_transport(tune_ctx *c, int cores, int oversub, char *out, size_t len) {
  double a, b, g, a2 = 0, b2 = 0;
  if (fit_alpha_beta(c, 2, &a, &b) || fit_gamma(c, a, b, &g)) return -1;
  double oa = 0, ob = 1;
  int over = 2 * cores > 8 ? 8 : 2 * cores;
  if (oversub && over > 2) {
    if (fit_alpha_beta(c, over, &a2, &b2)) return -1;
    oa = fmax(a2 - a, 0);
    ob = fmax(b2 / b, 1);
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
  printf("# weft-tune --measure: ring all-reduce / all-gather p50 of blocking calls, median of %d launches,\n"
         "# %ld online cores, chunk %zu B; perf programs from %s\n",
         LAUNCHES, cores, chunk_bytes, c.bindir);
  char model[1024] = "";
  size_t at = 0;
  for (int t = 0; weft__transports[t] != NULL; t++) {
    char row[128];
    c.transport = weft__transports[t]->name;
    if (fit_transport(&c, (int)cores, t == 0, row, sizeof row)) {
      if (t == 0) { /* the host's own transport must run */
        fprintf(stderr, "weft-tune: %s/%s\n", c.bindir, c.why);
        return 1;
      }
      printf("# %s does not run on this host (%s): it keeps its own row\n", c.transport, c.why);
      continue;
    }
    at += (size_t)snprintf(model + at, sizeof model - at, "%s%s", at ? ";" : "", row);
  }
  printf("export WEFT_TUNER_MODEL=\"%s\"\n", model);
  return 0;
}

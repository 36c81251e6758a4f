/* weft_tune.c: weft-tune prints the tuner's resolved choice per collective and size range,
 * for a rank count and transport, without a communicator: it evaluates the same table and
 * cost model as lib/select.c, under the WEFT_ALGO and WEFT_TUNER_MODEL of its environment.
 *
 *   weft-tune [-n NRANKS] [-t shm|socket] [-o] [-b MINBYTES] [-e MAXBYTES] [-c COLL] [-v] [--cpu KEY]
 *   weft-tune --list
 *   weft-tune --measure    fits the model to this machine (weft_tune_measure.c)
 * -o models more ranks than cores (oversubscribed); -v prints every candidate's cost per size.
 * Ranks on this one host use the transport's row fitted to its CPU where there is one
 * (transports/transport.h); --cpu names another CPU ("" for the stored rows).
 * Sizes are the bytes the model sees: the whole buffer, or the block per rank of an all-gather
 * or all-to-all. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/comm.h"
#include "lib/cpu_key.h"
#include "lib/env.h"
#include "lib/select.h"
#include "transports/transport.h"
#include "tools/weft_tune_measure.h"

static const weft__coll_t tuned[] = {WEFT__COLL_ALL_REDUCE, WEFT__COLL_ALL_GATHER,
                                     WEFT__COLL_REDUCE_SCATTER, WEFT__COLL_BROADCAST,
                                     WEFT__COLL_REDUCE, WEFT__COLL_ALL_TO_ALL};

static void print_size(char *buf, size_t len, size_t b) {
  if (b >= (1u << 30) && b % (1u << 30) == 0) snprintf(buf, len, "%zuG", b >> 30);
  else if (b >= (1u << 20) && b % (1u << 20) == 0) snprintf(buf, len, "%zuM", b >> 20);
  else if (b >= 1024 && b % 1024 == 0) snprintf(buf, len, "%zuK", b >> 10);
  else snprintf(buf, len, "%zu", b);
}

/* "4096", "64K", "16M", "1G" (powers of 1024); 0 when malformed. */
static size_t parse_size(const char *s) {
  char *end;
  unsigned long long x = strtoull(s, &end, 0);
  int shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20 : *end == 'G' || *end == 'g' ? 30 : 0;
  if (shift) end++;
  return *end == '\0' ? (size_t)(x << shift) : 0;
}

static void list_algos(void) {
  for (int c = 0; c < WEFT__NUM_COLLS; c++) {
    const weft__algo *a[WEFT__SELECT_MAX_CANDIDATES];
    int k = weft__select_candidates((weft__coll_t)c, a, WEFT__SELECT_MAX_CANDIDATES);
    printf("%-16s", weft__coll_name((weft__coll_t)c));
    for (int i = 0; i < k; i++) printf(" %s", a[i]->name);
    printf("\n");
  }
}

/* One collective: rows "from .. to: algorithm", merged over sizes min .. max (powers of 2). */
static void resolve_coll(weft__select_input in, const weft__algo_filter *f, size_t lo, size_t hi,
                         int verbose) {
  const weft__algo *cur = NULL;
  size_t from = lo;
  char a[32], b[32], why[512];
  for (size_t s = lo;; s *= 2) {
    in.bytes = s;
    const weft__algo *algo = weft__select_resolve(&in, f, why, sizeof(why));
    if (verbose) {
      print_size(a, sizeof(a), s);
      printf("  %-14s %8s B  %-18s %s\n", weft__coll_name(in.coll), a, algo->name, why);
    }
    if (cur != NULL && algo != cur && !verbose) {
      print_size(a, sizeof(a), from);
      print_size(b, sizeof(b), s / 2);
      printf("  %-14s %8s .. %-8s B  %s\n", weft__coll_name(in.coll), a, b, cur->name);
      from = s;
    }
    cur = algo;
    if (s >= hi || s > hi / 2) break;
  }
  if (!verbose) {
    print_size(a, sizeof(a), from);
    print_size(b, sizeof(b), hi);
    printf("  %-14s %8s .. %-8s B  %s\n", weft__coll_name(in.coll), a, b, cur->name);
  }
}

static void usage(FILE *f) {
  fprintf(f, "usage: weft-tune [-n NRANKS] [-t shm|socket|ib] [-o] [-b MIN] [-e MAX] [-c COLL] [-v] [--cpu KEY]\n"
             "       weft-tune --list\n"
             "       weft-tune --measure   (fits WEFT_TUNER_MODEL to this machine, ~40 s on 2 cores)\n"
             "Prints the algorithm weft's tuner picks per collective and size range\n"
             "(honours WEFT_ALGO, WEFT_TUNER_MODEL and WEFT_CHUNK_BYTES).\n"
             "  -n NRANKS   ranks (2)\n"
             "  -t NAME     transport: shm, socket or ib (shm)\n"
             "  -o          more ranks than cores (the oversubscription terms of the model)\n"
             "  -b, -e SIZE the size range, K/M/G suffixes (8 to 1G)\n"
             "  -c COLL     one collective: all_reduce, all_gather, reduce_scatter, broadcast, reduce,\n"
             "              all_to_all (default: all)\n"
             "  -v          every candidate's modelled cost\n"
             "  --cpu KEY   the row fitted to this CPU, as \"GenuineIntel 6/167\" (default: this host's;\n"
             "              \"\": the transport's stored row)\n"
             "  --list      the algorithms of each collective\n"
             "  --measure   run the collectives here and print the fitted WEFT_TUNER_MODEL (man weft-tune)\n");
}

int main(int argc, char **argv) {
  weft__select_input in = {.coll = WEFT__COLL_ALL_REDUCE, .nranks = 2, .transport = weft__transports[0],
                           .chunk_bytes = weft__env_size("WEFT_CHUNK_BYTES", 512 * 1024),
                           .cpu = weft__cpu_key()};
  size_t lo = 8, hi = (size_t)1 << 30;
  const char *only = NULL;
  int verbose = 0;
  static const struct option longopts[] = {{"list", no_argument, NULL, 'l'},
                                           {"measure", no_argument, NULL, 'm'},
                                           {"cpu", required_argument, NULL, 'C'},
                                           {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  int opt;
  argv[0] = (char *)"weft-tune"; /* getopt's messages: not the libtool ".libs/" path */
  while ((opt = getopt_long(argc, argv, "n:t:ob:e:c:vh", longopts, NULL)) != -1) {
    switch (opt) {
      case 'n': in.nranks = atoi(optarg); break;
      case 't':
        if ((in.transport = weft__transport_by_name(optarg)) == NULL) {
          fprintf(stderr, "weft-tune: -t %s: not a transport; valid:", optarg);
          for (int i = 0; weft__transports[i] != NULL; i++) fprintf(stderr, " %s", weft__transports[i]->name);
          fprintf(stderr, "\n");
          return 2;
        }
        break;
      case 'o': in.oversubscribed = 1; break;
      case 'b': lo = parse_size(optarg); break;
      case 'e': hi = parse_size(optarg); break;
      case 'c': only = optarg; break;
      case 'v': verbose = 1; break;
      case 'C': in.cpu = optarg; break;
      case 'l': list_algos(); return 0;
      case 'm': return weft_tune_measure(in.chunk_bytes);
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (in.nranks < 1 || lo < 1 || hi < lo) {
    usage(stderr);
    return 2;
  }
  int known = only == NULL;
  for (size_t i = 0; !known && i < sizeof(tuned) / sizeof(tuned[0]); i++)
    known = strcmp(only, weft__coll_name(tuned[i])) == 0;
  if (!known) {
    fprintf(stderr, "weft-tune: -c %s: not a tuned collective; valid:", only);
    for (size_t i = 0; i < sizeof(tuned) / sizeof(tuned[0]); i++)
      fprintf(stderr, "%s %s", i ? "," : "", weft__coll_name(tuned[i]));
    fprintf(stderr, "\n");
    return 2;
  }
  in.caps = in.transport->caps; /* rows that need what the transport lacks are out, as at run time */
  weft__algo_filter f;
  const char *spec = weft__env_str("WEFT_ALGO", "");
  if (!weft__algo_filter_parse(spec, &f))
    fprintf(stderr, "weft-tune: WEFT_ALGO=%s names something unknown (see --list)\n", spec);
  printf("# %d ranks over %s%s, chunk %zu B%s%s\n", in.nranks,
         in.transport->name, in.oversubscribed ? ", more ranks than cores" : "",
         in.chunk_bytes, *spec ? ", WEFT_ALGO=" : "", spec);
  weft__model_source from;
  const weft__transport_model *m = weft__select_model(in.transport, in.cpu, &from);
  printf("# model row %s:%g,%g,%g,%g,%g (%s%s)\n", in.transport->name, m->alpha_us, m->beta_us, m->gamma_us,
         m->oversub_alpha, m->oversub_beta,
         from == WEFT__MODEL_ENV ? "WEFT_TUNER_MODEL" : from == WEFT__MODEL_FITTED ? "fitted on " : "stored",
         from == WEFT__MODEL_FITTED ? in.cpu : "");
  for (size_t i = 0; i < sizeof(tuned) / sizeof(tuned[0]); i++) {
    in.coll = tuned[i];
    if (only && strcmp(only, weft__coll_name(in.coll)) != 0) continue;
    resolve_coll(in, &f, lo, hi, verbose);
  }
  return 0;
}

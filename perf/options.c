/*
 * options.c: the perf programs' flags, with nccl-tests' letters, meanings and defaults
 * (src/common.cu: -w 1, -c a number of check iterations, -z 0..3, -R 1 local vs 2
 * symmetric registration, -N, -I, -K, -S, -u, -M). Flags that need a GPU (-G, -x, -D,
 * -V) are accepted at their "off" value and refused with the reason otherwise, as are
 * nccl-tests' mulsum op and fp8 types, which weft does not have. weft adds -L (p50/p99 of
 * single calls).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf/perf_impl.h"
#include "perf/size_arg.h"

const char *const perf_type_names[WEFT_NUM_DATATYPES] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16"};
const char *const perf_op_names[WEFT_NUM_OPS] = {"sum", "prod", "max", "min", "avg"};

void perf_default_opts(perf_opts_t *o) {
  *o = (perf_opts_t){.minbytes = 32u << 20, .maxbytes = 32u << 20, .stepbytes = 1u << 20,
                     .stepfactor = 1, .iters = 20, .warmup = 1, .agg = 1, .check = 1,
                     .average = 1, .run_cycles = 1, .type = WEFT_FLOAT32, .op = WEFT_SUM,
                     .root = 0, .buffers = -1};
}

/* In weft_comm_init_from_env's order: the most specific launcher first. */
static const char *const rank_vars[] = {"WEFT_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                        "SLURM_PROCID"};

int perf_env_rank(void) {
  for (size_t i = 0; i < sizeof(rank_vars) / sizeof(rank_vars[0]); i++)
    if (getenv(rank_vars[i]))
      return atoi(getenv(rank_vars[i]));
  return -1;
}

/* An index into names, -1 for "all", -2 when unknown. */
static int parse_name(const char *s, const char *const *names, int n) {
  if (strcmp(s, "all") == 0)
    return -1;
  for (int i = 0; i < n; i++)
    if (strcmp(s, names[i]) == 0)
      return i;
  static const struct { const char *alias; int type; } aliases[] = {
      {"float16", WEFT_FLOAT16}, {"float32", WEFT_FLOAT32}, {"float64", WEFT_FLOAT64},
      {"bf16", WEFT_BFLOAT16}};
  for (size_t i = 0; names == perf_type_names && i < sizeof(aliases) / sizeof(aliases[0]); i++)
    if (strcmp(s, aliases[i].alias) == 0)
      return aliases[i].type;
  return -2;
}

static const char *bad_op(perf_opts_t *o, const char *arg) {
  o->op = parse_name(arg, perf_op_names, WEFT_NUM_OPS);
  if (strcmp(arg, "mulsum") == 0 || strcmp(arg, "premulsum") == 0)
    return "not supported: weft has no pre-multiplied sum op (NCCL's ncclRedOpCreatePreMulSum); "
           "valid ops: sum, prod, max, min, avg, all";
  return o->op == -2 ? "invalid op; valid ops: sum, prod, max, min, avg, all" : NULL;
}

static const char *bad_type(perf_opts_t *o, const char *arg) {
  o->type = parse_name(arg, perf_type_names, WEFT_NUM_DATATYPES);
  if (strncmp(arg, "f8", 2) == 0 || strncmp(arg, "fp8", 3) == 0 || strncmp(arg, "float8", 6) == 0)
    return "not supported: weft has no fp8 datatypes (f8e4m3, f8e5m2); valid types: int8, uint8, "
           "int32, uint32, int64, uint64, half, float, double, bfloat16, all";
  return o->type == -2 ? "invalid datatype; valid types: int8, uint8, int32, uint32, int64, "
                         "uint64, half (float16), float (float32), double (float64), bfloat16 "
                         "(bf16), all"
                       : NULL;
}

/* Flags that only mean something on a GPU: their "off" value is accepted. */
static const char *gpu_only(int ch, long v) {
  switch (ch) {
  case 'G': return v != 0 ? "-G (CUDA graph launches) not supported: weft runs collectives on "
                            "CPU threads, there is no CUDA graph to capture" : NULL;
  case 'x': return "-x (CTA policy) not supported: weft launches no CUDA kernels, so it has no CTAs";
  case 'D': return v != 0 ? "-D (device implementation) not supported: weft has no device-side "
                            "(GPU kernel) collectives" : NULL;
  case 'V': return "-V (device CTA count) not supported: weft has no device-side (GPU kernel) "
                   "collectives (-D)";
  default: return NULL;
  }
}

/* Applies one flag; returns NULL, or what is wrong with it. */
static const char *parse_option(perf_opts_t *o, int ch, const char *arg) {
  long v = strtol(arg, NULL, 0);
  switch (ch) {
  case 't':
  case 'g': return v != 1 ? "weft runs one rank per process: -t and -g must be 1" : NULL;
  case 'G': case 'x': case 'D': case 'V': return gpu_only(ch, v);
  case 'p': o->parallel_init = v != 0; return NULL;
  case 'b': return perf_parse_size(arg, &o->minbytes) ? "invalid size specified for 'minbytes'" : NULL;
  case 'e': return perf_parse_size(arg, &o->maxbytes) ? "invalid size specified for 'maxbytes'" : NULL;
  case 'i': return perf_parse_size(arg, &o->stepbytes) ? "invalid size specified for 'stepBytes'" : NULL;
  case 'f': o->stepfactor = v > 0 ? (size_t)v : 1; return NULL;
  case 'n': o->iters = (int)v; return v < 1 ? "-n needs at least 1 iteration" : NULL;
  case 'm': o->agg = (int)v; return v < 1 ? "-m needs at least 1" : NULL;
  case 'w': o->warmup = (int)v; return v < 0 ? "-w must be >= 0" : NULL;
  case 'N': o->run_cycles = (int)v; return v < 0 ? "-N must be >= 0 (0: run until stopped)" : NULL;
  case 'c': o->check = (int)v; return v < 0 ? "-c must be >= 0 check iterations" : NULL;
  case 'z': o->blocking = (int)v; return v < 0 || v > 3 ? "-z must be 0, 1, 2 or 3" : NULL;
  case 'y': o->stream_null = v != 0; return NULL;
  case 'T': o->timeout_s = (int)v; return v < 0 ? "-T must be >= 0 seconds" : NULL;
  case 'C': o->cputime = v != 0; return NULL;
  case 'S': o->timestamps = v != 0; return NULL;
  case 'M': o->memory_report = v != 0; return NULL;
  case 'u': o->unalign = (int)v; return v < 0 || v > 4096 ? "-u must be 0..4096 elements" : NULL;
  case 'I': o->per_iter = (int)v; return v != 0 && v != 1 ? "-I must be 0 or 1" : NULL;
  case 'K': o->per_iter_skip = (int)v; return v < 0 ? "-K must be >= 0" : NULL;
  case 'L': o->latency = v != 0; return NULL;
  case 'a': o->average = (int)v; return v < 0 || v > 3 ? "-a must be 0, 1, 2 or 3" : NULL;
  case 'r':
    o->root = strcmp(arg, "all") == 0 ? -1 : (int)v;
    return o->root < -1 ? "-r must be a rank, -1 or all" : NULL;
  case 'J': o->json_path = arg; return NULL;
  case 'R': o->local_register = (int)v; return v < 0 || v > 2 ? "-R must be 0, 1 or 2" : NULL;
  case 'B':
    o->buffers = strcmp(arg, "auto") == 0 ? -1 : strcmp(arg, "host") == 0 ? 0 : strcmp(arg, "device") == 0 ? 1 : -2;
    return o->buffers == -2 ? "-B must be auto, host or device" : NULL;
  case 'o': return bad_op(o, arg);
  case 'd': return bad_type(o, arg);
  default: return "unknown option";
  }
}

static void usage(FILE *f, const char *prog) {
  fprintf(f,
          "USAGE: %s (one rank per process: weftrun -n N, mpirun, srun or torchrun; alone: 1 rank)\n\t"
          "[-t,--nthreads <num threads>] (must be 1)\n\t"
          "[-g,--ngpus <gpus per thread>] (must be 1)\n\t"
          "[-b,--minbytes <min size in bytes>] (default 32M)\n\t"
          "[-e,--maxbytes <max size in bytes>] (default 32M)\n\t"
          "[-i,--stepbytes <increment size>] (default 1M)\n\t"
          "[-f,--stepfactor <increment factor>] (default 1: use -i)\n\t"
          "[-n,--iters <iteration count>] (default 20)\n\t"
          "[-m,--agg_iters <aggregated iteration count>] (default 1: -m calls in one group)\n\t"
          "[-w,--warmup_iters <warmup iteration count>] (default 1, at every size)\n\t"
          "[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)]\n\t"
          "[-p,--parallel_init <0/1>] (ranks are processes: always parallel)\n\t"
          "[-c,--check <check iteration count>] (default 1; 0: no check)\n\t"
          "[-o,--op <sum/prod/min/max/avg/all>] (default sum; no mulsum in weft)\n\t"
          "[-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/all>]"
          " (default float; no fp8 in weft)\n\t"
          "[-r,--root <root/all>] (rooted collectives; default 0; -1 or all: every root)\n\t"
          "[-z,--blocking <0/1/2/3> 0=calls on a stream, synchronized once; 1=wait and barrier "
          "after each call (-m group); 2=wait, no barrier; 3=wait and barrier after each -n "
          "iteration, time excludes the barrier] (1-3: blocking calls, NULL stream)\n\t"
          "[-y,--stream_null <0/1>] (1: blocking calls on the NULL stream, no barrier)\n\t"
          "[-T,--timeout <time in seconds>] (weft's deadline for every wait)\n\t"
          "[-G,--cudagraph <num graph launches>] (0 only: no GPU)\n\t"
          "[-C,--report_cputime <0/1>]\n\t"
          "[-S,--report_timestamps <0/1> report timestamps (default 0)]\n\t"
          "[-J,--output_file <file>] (nccl-tests' JSON document; path.0, path.1... if it exists)\n\t"
          "[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>]\n\t"
          "[-R,--local_register <0/1/2>] (1: the benchmark's own buffers registered with "
          "weft_comm_register, which adopts them;\n\t    2: buffers from weft_mem_alloc "
          "registered as windows; with either, collectives run direct; default 0)\n\t"
          "[-B,--buffers <auto/host/device>] (weft: where the buffers are; auto, the default: on "
          "the rank's GPU where weft was built with CUDA and one is there, as nccl-tests, else host)\n\t"
          "[-x,--cta_policy], [-D,--device_implementation], [-V,--device_cta_count] "
          "(no GPU kernels: refused; -D 0 accepted)\n\t"
          "[-M,--memory <0/1> enable memory usage report (default: 0)]\n\t"
          "[-u,--unalign <index of first element> misalign send and receive buffers (default: 0)]\n\t"
          "[-I,--per_iter_timing <0/1> per-iteration timing: i_min i_max i_p99 i_cv%% (max over "
          "ranks per iteration); weft has no stream events, so each iteration waits for its "
          "calls (default: 0)]\n\t"
          "[-K,--per_iter_skip <count> exclude leading samples from -I summary stats (default: 0)]\n\t"
          "[-L,--latency <0/1>] (weft: p50 and p99 of single blocking out-of-place calls,\n\t"
          "    an extra pass of -n calls after the timed loop, combined over ranks as -a says)\n\t"
          "[-h,--help]\n",
          prog);
}

/* Checks across flags, after all are read; NULL or what is wrong. */
static const char *bad_combination(perf_opts_t *o) {
  if (o->minbytes > o->maxbytes) return "invalid sizes for 'minbytes' and 'maxbytes'";
  if (o->per_iter_skip >= o->iters) return "-K must be below -n (per-iteration skip)";
  if (o->per_iter_skip && !o->per_iter) return "-K needs -I 1 (per-iteration timing)";
  return NULL;
}

int perf_parse_args(int argc, char **argv, perf_ctx_t *c) {
  static const struct option longopts[] = {
      {"nthreads", required_argument, 0, 't'},   {"ngpus", required_argument, 0, 'g'},
      {"minbytes", required_argument, 0, 'b'},   {"maxbytes", required_argument, 0, 'e'},
      {"stepbytes", required_argument, 0, 'i'},  {"stepfactor", required_argument, 0, 'f'},
      {"iters", required_argument, 0, 'n'},      {"agg_iters", required_argument, 0, 'm'},
      {"warmup_iters", required_argument, 0, 'w'}, {"run_cycles", required_argument, 0, 'N'},
      {"parallel_init", required_argument, 0, 'p'}, {"check", required_argument, 0, 'c'},
      {"op", required_argument, 0, 'o'},         {"datatype", required_argument, 0, 'd'},
      {"root", required_argument, 0, 'r'},       {"blocking", required_argument, 0, 'z'},
      {"stream_null", required_argument, 0, 'y'}, {"timeout", required_argument, 0, 'T'},
      {"cudagraph", required_argument, 0, 'G'},  {"report_cputime", required_argument, 0, 'C'},
      {"report_timestamps", required_argument, 0, 'S'},
      {"output_file", required_argument, 0, 'J'}, {"json", required_argument, 0, 'J'},
      {"average", required_argument, 0, 'a'},    {"local_register", required_argument, 0, 'R'},
      {"cta_policy", required_argument, 0, 'x'}, {"device_implementation", required_argument, 0, 'D'},
      {"device_cta_count", required_argument, 0, 'V'}, {"memory", required_argument, 0, 'M'},
      {"unalign", required_argument, 0, 'u'},    {"per_iter_timing", required_argument, 0, 'I'},
      {"per_iter_skip", required_argument, 0, 'K'}, {"latency", required_argument, 0, 'L'},
      {"buffers", required_argument, 0, 'B'},
      {"help", no_argument, 0, 'h'},             {0, 0, 0, 0}};
  perf_opts_t *o = &c->o;
  int quiet = perf_env_rank() > 0, ch;
  argv[0] = (char *)c->prog; /* getopt's own messages: "all_reduce_perf", not ".libs/..." */
  opterr = !quiet;
  while ((ch = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:L:B:",
                           longopts, NULL)) != -1) {
    if (ch == 'h' || ch == '?' || ch == ':') {
      if (!quiet)
        usage(ch == 'h' ? stdout : stderr, c->prog);
      return ch == 'h' ? 0 : 2;
    }
    const char *bad = parse_option(o, ch, optarg);
    if (bad) {
      if (!quiet)
        fprintf(stderr, "%s: -%c %s: %s\n", c->prog, ch, optarg, bad);
      return 2;
    }
  }
  const char *bad = bad_combination(o);
  if (bad && !quiet)
    fprintf(stderr, "%s: %s (-b %zu -e %zu -n %d -I %d -K %d)\n", c->prog, bad, o->minbytes,
            o->maxbytes, o->iters, o->per_iter, o->per_iter_skip);
  return bad ? 2 : -1;
}

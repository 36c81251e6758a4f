/* trainers/test_blas_core.c: the trainers run OpenBLAS's AVX-512 kernels on a CPU that has
 * full-width AVX-512, even when OpenBLAS's own detection falls back to AVX2, and its AVX2
 * kernels on one that runs AVX-512 in 256-bit halves (AMD Zen 4), even when OpenBLAS picks
 * AVX-512 ones there, and say so at start-up (weft issue 20; blas_core.h).
 *
 * The choice itself (gpt_blas_pick_core) is checked on made-up facts: detected core names,
 * CPU flag sets, a user's OPENBLAS_CORETYPE, the re-execution marker, a library without
 * DYNAMIC_ARCH. Then weftrun launches weft-train-ddp --steps 0 from the build directory
 * (WEFT_TOP_BUILDDIR) with neither variable set: its "# peak per rank" line must name the
 * OpenBLAS core and the sgemm rate, and on a CPU with the AVX-512 subsets (and a
 * DYNAMIC_ARCH OpenBLAS) the core must be an AVX-512 one, or one without AVX-512 where the
 * CPU runs it in halves; with OPENBLAS_CORETYPE=Haswell set by the user it must run
 * Haswell, say the environment chose it and, where the CPU and library could run faster
 * AVX-512 kernels, say how to get them. weft-train prints the same line, its FMA peak
 * measured unless given, and its MFU column divides by that peak; and the FMA peak is not
 * halved by a second busy process on the same CPU (metrics.h). Without
 * ../shared/data/tinyshakespeare.txt or the programs the launch tests pass as "# SKIP".
 */
#include <math.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
/* cmocka.h needs the headers above first. */
#include <cmocka.h>

#include <cblas.h>

#include "trainers/blas_core.h"
#include "trainers/metrics.h"
#include "trainers/test_util.h"

/* An AVX-512 CPU under a DYNAMIC_ARCH OpenBLAS that fell back to Haswell, nothing set. */
static gpt_blas_facts fallback(void) {
  return (gpt_blas_facts){.detected = "Haswell", .dynamic_arch = 1, .cpu = GPT_CPU_SKYLAKEX_SET};
}

static void haswell_fallback_on_an_avx512_cpu_picks_skylakex(void **state) {
  gpt_blas_facts f = fallback();
  assert_string_equal(gpt_blas_pick_core(&f), "SkylakeX");
  f.detected = "Zen"; /* the AVX2 kernels OpenBLAS gives AMD's Zen 1-3 */
  assert_string_equal(gpt_blas_pick_core(&f), "SkylakeX");
  f.detected = "Prescott"; /* the last-resort fallback of an unknown CPU */
  assert_string_equal(gpt_blas_pick_core(&f), "SkylakeX");
}

static void avx512_cores_are_left_as_openblas_picked_them(void **state) {
  const char *const cores[] = {"SkylakeX", "skylakex", "Cooperlake", "COOPERLAKE", "SapphireRapids"};
  for (size_t i = 0; i < sizeof(cores) / sizeof(cores[0]); i++) {
    gpt_blas_facts f = fallback();
    f.detected = cores[i];
    if (gpt_blas_pick_core(&f)) fail_msg("detected %s: weft should not switch", cores[i]);
    assert_true(gpt_blas_core_is_avx512(cores[i]));
  }
  assert_false(gpt_blas_core_is_avx512("Haswell"));
  assert_false(gpt_blas_core_is_avx512(NULL));
}

/* Zen 4: AVX-512 in two 256-bit halves, where OpenBLAS 0.3.21 picks Cooperlake. */
static void a_cpu_running_avx512_in_halves_gets_the_avx2_kernels(void **state) {
  const char *const avx512[] = {"Cooperlake", "SkylakeX", "sapphirerapids"};
  for (size_t i = 0; i < sizeof(avx512) / sizeof(avx512[0]); i++) {
    gpt_blas_facts f = fallback();
    f.cpu |= GPT_CPU_AVX512_HALVES;
    f.detected = avx512[i];
    const char *core = gpt_blas_pick_core(&f);
    if (!core || strcmp(core, "Haswell")) fail_msg("detected %s on Zen 4: picked %s, not Haswell", avx512[i], core);
    f.env_coretype = "Cooperlake"; /* the user's choice still wins */
    assert_null(gpt_blas_pick_core(&f));
    f.env_coretype = NULL;
    f.env_marker = avx512[i]; /* weft's own re-execution */
    assert_null(gpt_blas_pick_core(&f));
    f.env_marker = NULL;
    f.dynamic_arch = 0;
    assert_null(gpt_blas_pick_core(&f));
  }
  const char *const avx2[] = {"Haswell", "Zen", "Prescott"}; /* already without AVX-512: kept */
  for (size_t i = 0; i < sizeof(avx2) / sizeof(avx2[0]); i++) {
    gpt_blas_facts f = fallback();
    f.cpu |= GPT_CPU_AVX512_HALVES;
    f.detected = avx2[i];
    if (gpt_blas_pick_core(&f)) fail_msg("detected %s on Zen 4: weft should not switch", avx2[i]);
    f.env_coretype = "Haswell"; /* nothing faster to point the user at */
    assert_false(gpt_blas_user_core_forgoes_avx512(&f));
  }
}

static void a_cpu_without_any_one_avx512_subset_keeps_the_avx2_kernels(void **state) {
  const unsigned bits[] = {GPT_CPU_AVX512F, GPT_CPU_AVX512CD, GPT_CPU_AVX512BW, GPT_CPU_AVX512DQ, GPT_CPU_AVX512VL};
  for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++) {
    gpt_blas_facts f = fallback();
    f.cpu &= ~bits[i];
    if (gpt_blas_pick_core(&f)) fail_msg("CPU flags 0x%x (lacking 0x%x): weft should not switch", f.cpu, bits[i]);
  }
  gpt_blas_facts avx2_only = fallback();
  avx2_only.cpu = 0;
  assert_null(gpt_blas_pick_core(&avx2_only));
}

static void a_user_openblas_coretype_wins_even_when_empty(void **state) {
  gpt_blas_facts f = fallback();
  f.env_coretype = "Haswell";
  assert_null(gpt_blas_pick_core(&f));
  f.env_coretype = "";
  assert_null(gpt_blas_pick_core(&f));
}

static void a_user_core_without_avx512_on_an_avx512_cpu_is_flagged(void **state) {
  gpt_blas_facts f = fallback();
  assert_false(gpt_blas_user_core_forgoes_avx512(&f)); /* nothing set: weft chooses instead */
  f.env_coretype = "Haswell";
  assert_true(gpt_blas_user_core_forgoes_avx512(&f));
  f.detected = "SkylakeX"; /* the user's own AVX-512 choice */
  f.env_coretype = "SkylakeX";
  assert_false(gpt_blas_user_core_forgoes_avx512(&f));
  f = fallback();
  f.env_coretype = "Haswell";
  f.env_marker = "Haswell"; /* weft's own re-execution */
  assert_false(gpt_blas_user_core_forgoes_avx512(&f));
  f.env_marker = NULL;
  f.cpu &= ~GPT_CPU_AVX512VL;
  assert_false(gpt_blas_user_core_forgoes_avx512(&f));
  f = fallback();
  f.env_coretype = "Haswell";
  f.dynamic_arch = 0;
  assert_false(gpt_blas_user_core_forgoes_avx512(&f));
}

static void the_marker_stops_a_second_reexecution(void **state) {
  gpt_blas_facts f = fallback();
  f.env_marker = "Haswell"; /* e.g. the variable was lost but weft already re-executed once */
  assert_null(gpt_blas_pick_core(&f));
}

static void a_library_without_dynamic_arch_is_not_reexecuted_for_nothing(void **state) {
  gpt_blas_facts f = fallback();
  f.dynamic_arch = 0;
  assert_null(gpt_blas_pick_core(&f));
}

/* The "# peak per rank" line of dir/out, or fails. */
static void peak_line(const char *dir, char *line, size_t len) {
  char path[4200];
  snprintf(path, sizeof(path), "%s/out", dir);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  int found = 0;
  while (!found && fgets(line, (int)len, f)) found = !strncmp(line, "# peak per rank:", 16);
  fclose(f);
  if (!found) fail_msg("no '# peak per rank' line in %s", path);
}

/* Launches weft-train-ddp --steps 0 on one rank with OPENBLAS_CORETYPE as given (NULL:
 * unset) and the marker unset; returns its core name in core and its peak line in line. */
static void launch_ddp(const char *coretype, char *core, size_t core_len, char *line, size_t line_len) {
  char dir[] = "/tmp/test_blas_core.XXXXXX";
  tu_mkdtemp(dir);
  unsetenv(GPT_BLAS_MARKER);
  if (coretype) setenv("OPENBLAS_CORETYPE", coretype, 1);
  else unsetenv("OPENBLAS_CORETYPE");
  tu_run(dir, 1, "weft-train-ddp", 60,
         "--layers 1 --dmodel 32 --heads 2 --seq 16 --steps 0 --eval-batches 0 --peak-gflops 100 "
         "--log none --plot none");
  unsetenv("OPENBLAS_CORETYPE");
  peak_line(dir, line, line_len);
  tu_rmdir(dir);
  print_message("# %s", line);
  const char *at = strstr(line, " on OpenBLAS ");
  if (!at || !(at = strstr(at, " core "))) fail_msg("the peak line names no OpenBLAS core: %s", line);
  char fmt[32];
  snprintf(fmt, sizeof(fmt), " core %%%zus", core_len - 1);
  assert_int_equal(sscanf(at, fmt, core), 1);
  double sgemm = 0.0;
  const char *s = strstr(line, "sgemm 512^3 ");
  if (!s || sscanf(s, "sgemm 512^3 %lf GFLOP/s", &sgemm) != 1 || !(sgemm > 0.0))
    fail_msg("the peak line gives no sgemm rate: %s", line);
}

/* 1 when this CPU and the loaded OpenBLAS can run the AVX-512 kernels. */
static int avx512_within_reach(void) {
  return strstr(openblas_get_config(), "DYNAMIC_ARCH") != NULL &&
         (gpt_blas_cpu_flags() & GPT_CPU_SKYLAKEX_SET) == GPT_CPU_SKYLAKEX_SET;
}

static void ddp_startup_line_names_the_faster_core_for_this_cpu(void **state) {
  char core[64], line[1024];
  launch_ddp(NULL, core, sizeof(core), line, sizeof(line));
  unsigned cpu = gpt_blas_cpu_flags();
  if (avx512_within_reach()) {
    int halves = (cpu & GPT_CPU_AVX512_HALVES) != 0; /* then the AVX2 kernels are the faster */
    if (gpt_blas_core_is_avx512(core) == halves)
      fail_msg("an AVX-512 CPU%s runs core %s: %s", halves ? " running it in 256-bit halves" : "", core, line);
    if (!strstr(line, "(chosen by weft: OpenBLAS picked ") && !strstr(line, "(OpenBLAS's own choice)"))
      fail_msg("the peak line does not say who chose core %s: %s", core, line);
  } else {
    print_message("# this CPU (flags 0x%x) or OpenBLAS (%s) cannot switch: core %s as detected\n", cpu,
                  openblas_get_config(), core);
    assert_non_null(strstr(line, "OpenBLAS's own choice"));
  }
}

static void a_user_coretype_runs_and_is_named_on_the_startup_line(void **state) {
  char core[64], line[1024];
  launch_ddp("Haswell", core, sizeof(core), line, sizeof(line));
  assert_string_equal(core, "Haswell");
  assert_non_null(strstr(line, "(OPENBLAS_CORETYPE=Haswell in the environment"));
  const char *hint = "unset it and weft chooses SkylakeX)";
  int faster = avx512_within_reach() && !(gpt_blas_cpu_flags() & GPT_CPU_AVX512_HALVES);
  if (faster && !strstr(line, hint)) fail_msg("no hint to unset OPENBLAS_CORETYPE: %s", line);
  if (!faster && strstr(line, hint)) fail_msg("a hint of no faster kernels on this CPU: %s", line);
}

/* Launches weft-train for one step of a tiny model with `extra` flags; returns its peak line
 * in line and the step's GFLOP/s and MFU (percent) columns. */
static void launch_train(const char *extra, char *line, size_t line_len, double *gflops, double *mfu) {
  char dir[] = "/tmp/test_blas_core.XXXXXX", args[512], path[4200], row[512];
  tu_mkdtemp(dir);
  snprintf(args, sizeof(args), "--layers 1 --dmodel 32 --heads 2 --seq 16 --steps 1 --eval-batches 0 %s", extra);
  tu_run(dir, 1, "weft-train", 60, args);
  peak_line(dir, line, line_len);
  print_message("# %s", line);
  snprintf(path, sizeof(path), "%s/out", dir);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  long step = 0;
  double loss, gnorm, ms, tps;
  int found = 0;
  while (!found && fgets(row, sizeof(row), f))
    found = sscanf(row, "%ld %lf %lf %lf %lf %lf %lf%%", &step, &loss, &gnorm, &ms, &tps, gflops, mfu) == 7 &&
            step == 1;
  fclose(f);
  tu_rmdir(dir);
  if (!found) fail_msg("weft-train printed no line for step 1");
}

/* weft-train's MFU divides by the peak the distributed trainers use: its FMA loop measured
 * at start-up, on the same header line (it used a fixed 112 GFLOP/s, and read 94% MFU on a
 * core whose FMA loop reaches 173), with the SGEMM rate and the OpenBLAS core beside it. */
static void weft_train_divides_by_the_peak_it_measured(void **state) {
  char line[1024];
  double gflops = 0, mfu = 0, peak = 0;
  launch_train("", line, sizeof(line), &gflops, &mfu);
  if (sscanf(line, "# peak per rank: FMA loop %lf GFLOP/s", &peak) != 1 || !(peak > 0))
    fail_msg("weft-train's peak line gives no measured FMA peak: %s", line);
  if (!strstr(line, "sgemm 512^3 ") || !strstr(line, " core ")) fail_msg("no sgemm rate or core: %s", line);
  if (fabs(mfu - 100.0 * gflops / peak) > 0.1)
    fail_msg("MFU %.1f%% is not %.2f GFLOP/s over the %.1f GFLOP/s peak", mfu, gflops, peak);
}

static void weft_train_divides_by_a_given_peak(void **state) {
  char line[1024];
  double gflops = 0, mfu = 0;
  launch_train("--peak-gflops 250", line, sizeof(line), &gflops, &mfu);
  if (strncmp(line, "# peak per rank: 250.0 GFLOP/s (given)", 38)) fail_msg("not the given peak: %s", line);
  if (fabs(mfu - 100.0 * gflops / 250.0) > 0.1) fail_msg("MFU %.1f%% is not %.2f GFLOP/s over 250", mfu, gflops);
}

/* The FMA peak is measured past a second busy process on the same CPU, as on a shared
 * machine: the peak with a spinning process beside it must be within 20% of the peak alone.
 * With 10 runs of 8 ms each it read 72-91 GFLOP/s so shared, on an AVX-512 core whose FMA
 * loop reaches 173 alone (and whose SGEMM ran 107-141 in the same start-ups); with runs of
 * 1 ms, 176-179. */
static void the_fma_peak_is_measured_past_a_process_sharing_the_core(void **state) {
  cpu_set_t was, one;
  assert_int_equal(sched_getaffinity(0, sizeof(was), &was), 0);
  int cpu = sched_getcpu();
  assert_true(cpu >= 0);
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
  gpt_peak alone, shared;
  gpt_measure_peak(&alone);
  pid_t spinner = fork();
  assert_true(spinner >= 0);
  if (spinner == 0) { /* inherits the one CPU; gone within 30 s whatever happens here */
    alarm(30);
    for (volatile unsigned long n = 0;; n++) {
    }
  }
  gpt_measure_peak(&shared);
  kill(spinner, SIGKILL);
  waitpid(spinner, NULL, 0);
  assert_int_equal(sched_setaffinity(0, sizeof(was), &was), 0);
  print_message("# CPU %d: FMA loop %.1f GFLOP/s (%s) alone, %.1f beside a spinning process\n", cpu,
                alone.fma_gflops, alone.isa, shared.fma_gflops);
  if (shared.fma_gflops < 0.8 * alone.fma_gflops)
    fail_msg("the FMA peak read %.1f GFLOP/s beside a busy process against %.1f alone: it measured the sharing",
             shared.fma_gflops, alone.fma_gflops);
}

int main(void) {
  const char *const progs[] = {"weftrun", "weft-train-ddp", "weft-train", NULL};
  const char *why = tu_missing(progs);
  struct CMUnitTest tests[] = {
      cmocka_unit_test(haswell_fallback_on_an_avx512_cpu_picks_skylakex),
      cmocka_unit_test(avx512_cores_are_left_as_openblas_picked_them),
      cmocka_unit_test(a_cpu_running_avx512_in_halves_gets_the_avx2_kernels),
      cmocka_unit_test(a_cpu_without_any_one_avx512_subset_keeps_the_avx2_kernels),
      cmocka_unit_test(a_user_openblas_coretype_wins_even_when_empty),
      cmocka_unit_test(a_user_core_without_avx512_on_an_avx512_cpu_is_flagged),
      cmocka_unit_test(the_marker_stops_a_second_reexecution),
      cmocka_unit_test(a_library_without_dynamic_arch_is_not_reexecuted_for_nothing),
      cmocka_unit_test(the_fma_peak_is_measured_past_a_process_sharing_the_core),
      cmocka_unit_test(ddp_startup_line_names_the_faster_core_for_this_cpu),
      cmocka_unit_test(a_user_coretype_runs_and_is_named_on_the_startup_line),
      cmocka_unit_test(weft_train_divides_by_the_peak_it_measured),
      cmocka_unit_test(weft_train_divides_by_a_given_peak),
  };
  size_t n = sizeof(tests) / sizeof(tests[0]);
  if (why) tu_skip(tests, 9, n, why);
  return _cmocka_run_group_tests("test_blas_core", tests, n, NULL, NULL);
}

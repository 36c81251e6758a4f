/* trainers/blas_core.c: choosing OpenBLAS's kernels before the trainers run; see
 * blas_core.h.
 *
 * Why a re-execution: OpenBLAS reads OPENBLAS_CORETYPE in its library constructor, which
 * runs before the program's main() and before the program's own constructors (a library
 * is initialised before what depends on it). Setting the variable from main() changes
 * nothing, and the trainers link OpenBLAS directly (no dlopen). exec() with the variable
 * set loads the library afresh; it costs one start-up (a few ms) and only happens where
 * the library's own pick is not the faster kernel (a CPU it does not know; Zen 4).
 */
#include "trainers/blas_core.h"

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define AVX512_CORE "SkylakeX" /* on CPUs with full-width AVX-512 */
#define AVX2_CORE "Haswell"     /* on CPUs that run AVX-512 in 256-bit halves */

/* Why the re-execution did not happen although it should have, and the core it was for,
 * for gpt_blas_describe. */
static char exec_failure[128];
static const char *exec_core;

int gpt_blas_core_is_avx512(const char *corename) {
  static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
  if (!corename) return 0;
  for (size_t i = 0; i < sizeof(avx512) / sizeof(avx512[0]); i++)
    if (!strcasecmp(corename, avx512[i])) return 1;
  return 0;
}

/* 1 when the library could switch between AVX-512 and AVX2 kernels on this CPU. */
static int can_switch(const gpt_blas_facts *f) {
  return f->dynamic_arch && (f->cpu & GPT_CPU_SKYLAKEX_SET) == GPT_CPU_SKYLAKEX_SET;
}

/* 1 when the library runs kernels without AVX-512 although it could switch to the
 * AVX-512 ones, and they would be the faster ones here. */
static int avx512_left_unused(const gpt_blas_facts *f) {
  return can_switch(f) && !(f->cpu & GPT_CPU_AVX512_HALVES) && !gpt_blas_core_is_avx512(f->detected);
}

const char *gpt_blas_pick_core(const gpt_blas_facts *f) {
  if (f->env_coretype || f->env_marker) return NULL; /* the user's choice, or ours already */
  if (avx512_left_unused(f)) return AVX512_CORE;
  if (can_switch(f) && (f->cpu & GPT_CPU_AVX512_HALVES) && gpt_blas_core_is_avx512(f->detected)) return AVX2_CORE;
  return NULL;
}

int gpt_blas_user_core_forgoes_avx512(const gpt_blas_facts *f) {
  return f->env_coretype && !f->env_marker && avx512_left_unused(f);
}

unsigned gpt_blas_cpu_flags(void) {
  __builtin_cpu_init();
  unsigned f = 0;
  if (__builtin_cpu_supports("avx512f")) f |= GPT_CPU_AVX512F;
  if (__builtin_cpu_supports("avx512cd")) f |= GPT_CPU_AVX512CD;
  if (__builtin_cpu_supports("avx512bw")) f |= GPT_CPU_AVX512BW;
  if (__builtin_cpu_supports("avx512dq")) f |= GPT_CPU_AVX512DQ;
  if (__builtin_cpu_supports("avx512vl")) f |= GPT_CPU_AVX512VL;
  if ((f & GPT_CPU_AVX512F) && __builtin_cpu_is("amdfam19h")) f |= GPT_CPU_AVX512_HALVES;
  return f;
}

/* openblas_get_config() is "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64". */
static int library_is_dynamic(void) {
  const char *cfg = openblas_get_config();
  return cfg && strstr(cfg, "DYNAMIC_ARCH") != NULL;
}

/* The facts of this process as the library loaded. */
static gpt_blas_facts facts_now(void) {
  return (gpt_blas_facts){.detected = openblas_get_corename(),
                          .dynamic_arch = library_is_dynamic(),
                          .cpu = gpt_blas_cpu_flags(),
                          .env_coretype = getenv("OPENBLAS_CORETYPE"),
                          .env_marker = getenv(GPT_BLAS_MARKER)};
}

void gpt_blas_choose(char **argv) {
  gpt_blas_facts f = facts_now();
  const char *core = gpt_blas_pick_core(&f);
  if (!core) return;
  /* Set only for the new image: if anything fails, both go again, and the children of this
   * process see the environment as it was. */
  exec_core = core;
  if (setenv(GPT_BLAS_MARKER, f.detected ? f.detected : "unknown", 1) || setenv("OPENBLAS_CORETYPE", core, 1)) {
    snprintf(exec_failure, sizeof(exec_failure), "setenv: %s", strerror(errno));
  } else {
    fflush(NULL);
    execv("/proc/self/exe", argv);
    snprintf(exec_failure, sizeof(exec_failure), "re-executing /proc/self/exe: %s", strerror(errno));
  }
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(GPT_BLAS_MARKER);
}

void gpt_blas_describe(char *buf, size_t len) {
  const char *cfg = openblas_get_config();
  /* The first two words of the config string: "OpenBLAS 0.3.21". */
  char version[32] = "OpenBLAS";
  if (cfg) snprintf(version, sizeof(version), "%s", cfg);
  char *sp = strchr(version, ' ');
  if (sp && (sp = strchr(sp + 1, ' '))) *sp = '\0';
  gpt_blas_facts f = facts_now();
  const char *core = f.detected, *env = f.env_coretype, *marker = f.env_marker;
  const char *hint = gpt_blas_user_core_forgoes_avx512(&f)
                         ? "; this CPU runs OpenBLAS's AVX-512 kernels, about twice the SGEMM rate: unset it "
                           "and weft chooses " AVX512_CORE
                         : "";
  if (env && marker && !strcasecmp(env, AVX512_CORE))
    snprintf(buf, len, "%s core %s (chosen by weft: OpenBLAS picked %s, the CPU has AVX-512)", version, core, marker);
  else if (env && marker && !strcasecmp(env, AVX2_CORE))
    snprintf(buf, len, "%s core %s (chosen by weft: OpenBLAS picked %s, the CPU runs AVX-512 in 256-bit halves "
             "and the AVX2 kernels are faster there)", version, core, marker);
  else if (env)
    snprintf(buf, len, "%s core %s (OPENBLAS_CORETYPE=%s in the environment%s)", version, core, env, hint);
  else if (exec_failure[0])
    snprintf(buf, len, "%s core %s (OpenBLAS's own choice; switching to %s failed: %s)", version, core,
             exec_core ? exec_core : "another core", exec_failure);
  else
    snprintf(buf, len, "%s core %s (OpenBLAS's own choice)", version, core);
}

/* trainers/blas_core.c: choosing OpenBLAS's kernels before the trainers run; see
 * blas_core.h.
 *
 * Why a re-execution: OpenBLAS reads OPENBLAS_CORETYPE in its library constructor, which
 * runs before the program's main() and before the program's own constructors (a library
 * is initialised before what depends on it). Setting the variable from main() changes
 * nothing, and the trainers link OpenBLAS directly (no dlopen). exec() with the variable
 * set loads the library afresh; it costs one start-up (a few ms) and only happens on a
 * CPU the library does not know.
 */
#include "trainers/blas_core.h"

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define CHOSEN_CORE "SkylakeX"

/* Why the re-execution did not happen although it should have, for gpt_blas_describe. */
static char exec_failure[128];

int gpt_blas_core_is_avx512(const char *corename) {
  static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
  if (!corename) return 0;
  for (size_t i = 0; i < sizeof(avx512) / sizeof(avx512[0]); i++)
    if (!strcasecmp(corename, avx512[i])) return 1;
  return 0;
}

/* 1 when the library runs kernels without AVX-512 although it could switch to the
 * AVX-512 ones this CPU supports. */
static int avx512_left_unused(const gpt_blas_facts *f) {
  return f->dynamic_arch && !gpt_blas_core_is_avx512(f->detected) &&
         (f->cpu & GPT_CPU_SKYLAKEX_SET) == GPT_CPU_SKYLAKEX_SET;
}

const char *gpt_blas_pick_core(const gpt_blas_facts *f) {
  if (f->env_coretype || f->env_marker) return NULL; /* the user's choice, or ours already */
  return avx512_left_unused(f) ? CHOSEN_CORE : NULL;
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
                           "and weft chooses " CHOSEN_CORE
                         : "";
  if (env && marker && !strcasecmp(env, CHOSEN_CORE))
    snprintf(buf, len, "%s core %s (chosen by weft: OpenBLAS picked %s, the CPU has AVX-512)", version, core, marker);
  else if (env)
    snprintf(buf, len, "%s core %s (OPENBLAS_CORETYPE=%s in the environment%s)", version, core, env, hint);
  else if (exec_failure[0])
    snprintf(buf, len, "%s core %s (OpenBLAS's own choice; switching to %s failed: %s)", version, core,
             CHOSEN_CORE, exec_failure);
  else
    snprintf(buf, len, "%s core %s (OpenBLAS's own choice)", version, core);
}

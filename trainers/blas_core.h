/* trainers/blas_core.h: which OpenBLAS kernels the trainers' matrix products run on (weft
 * issue 20).
 *
 * OpenBLAS built with DYNAMIC_ARCH (Debian's is) picks its kernels once, in the library's
 * constructor, from the CPU's model number. A CPU newer than the library (0.3.21 knows no
 * Zen 5, no Emerald Rapids) gets a fallback, and the fallback may be the AVX2 Haswell
 * kernels on a CPU with AVX-512: one core's 1536^3 SGEMM then runs at about half the rate
 * of the SkylakeX (AVX-512) kernels. The only way in is OPENBLAS_CORETYPE, read by that
 * constructor, i.e. before main() runs. So gpt_blas_choose, called first thing in main(),
 * asks the loaded library what it picked and, when it is not an AVX-512 core but the CPU
 * and OS support the AVX-512 subsets those kernels use (F, CD, BW, DQ, VL), re-executes
 * the program once with OPENBLAS_CORETYPE=SkylakeX and WEFT_BLAS_DETECTED=<what OpenBLAS
 * picked> set. The new image keeps the pid, the open files and the rest of the
 * environment, so launchers (weftrun, mpirun, srun) never see it.
 *
 * The other way round on AMD's Zen 4 (family 25, the one core of that family with
 * AVX-512): it runs each 512-bit operation as two 256-bit halves, so AVX-512 kernels do no
 * more FLOPs a cycle than AVX2 ones (the trainers' FMA loop: 117.9 GFLOP/s either way), and
 * there the Haswell kernels measured faster than the AVX-512 ones OpenBLAS 0.3.21 picks
 * (Cooperlake): on the Zen 4 VM, one core, 512^3 SGEMM 108-109 against 102-104 GFLOP/s;
 * the small model's 1-rank step 439-441 against 464-475 ms (3 interleaved launches each);
 * make bench-trainers, 2 ranks, both sides on each core in turn (alternating rounds,
 * medians): small model (4 rounds) weft 8944 against 8640 tokens/s, PyTorch 6933 against
 * 6878; large (3 rounds) weft 2805 against 2496, PyTorch 2016 against 2028. So there
 * gpt_blas_choose re-executes with OPENBLAS_CORETYPE=Haswell.
 *
 * A user's OPENBLAS_CORETYPE is honoured as it is, and WEFT_BLAS_DETECTED stops a second
 * re-execution, so the program never loops. Children (ranks launched by a test, the plot's
 * python3) inherit both and so run the same kernels. Everything here is per process and
 * not thread-safe: gpt_blas_choose must run before any thread is started.
 */
#ifndef WEFT_TRAINERS_BLAS_CORE_H
#define WEFT_TRAINERS_BLAS_CORE_H

#include <stddef.h>

/* The environment variable weft sets beside OPENBLAS_CORETYPE: the core OpenBLAS had
 * picked by itself. Its presence means "weft chose", and it is never re-executed on. */
#define GPT_BLAS_MARKER "WEFT_BLAS_DETECTED"

/* The AVX-512 subsets OpenBLAS's SkylakeX kernels are compiled for (-march=skylake-avx512),
 * each supported by the CPU and enabled by the OS. */
enum {
  GPT_CPU_AVX512F = 1u << 0,
  GPT_CPU_AVX512CD = 1u << 1,
  GPT_CPU_AVX512BW = 1u << 2,
  GPT_CPU_AVX512DQ = 1u << 3,
  GPT_CPU_AVX512VL = 1u << 4,
  GPT_CPU_SKYLAKEX_SET = GPT_CPU_AVX512F | GPT_CPU_AVX512CD | GPT_CPU_AVX512BW | GPT_CPU_AVX512DQ | GPT_CPU_AVX512VL,
  /* Not a feature: the CPU runs 512-bit operations as two 256-bit halves (AMD family 25,
   * Zen 4), so the AVX2 kernels are the faster ones (see above). */
  GPT_CPU_AVX512_HALVES = 1u << 5,
};

/* What the choice depends on, gathered by gpt_blas_choose (or made up by a test). */
typedef struct gpt_blas_facts {
  const char *detected;      /* openblas_get_corename() as the library loaded, e.g. "Haswell" */
  int dynamic_arch;          /* 1: the library picks kernels at load time (openblas_get_config
                              * says DYNAMIC_ARCH), so OPENBLAS_CORETYPE can change them */
  unsigned cpu;              /* GPT_CPU_* bits the CPU and OS support */
  const char *env_coretype;  /* OPENBLAS_CORETYPE as found, or NULL */
  const char *env_marker;    /* GPT_BLAS_MARKER as found, or NULL */
} gpt_blas_facts;

/* 1 when corename (any case) is an OpenBLAS core with AVX-512 kernels: SkylakeX,
 * Cooperlake, SapphireRapids. */
int gpt_blas_core_is_avx512(const char *corename);

/* The core to run instead of the detected one, or NULL to leave OpenBLAS as it is: NULL
 * when the user set OPENBLAS_CORETYPE (an empty value counts as set), when weft already
 * chose (the marker is set), when the library cannot switch (no DYNAMIC_ARCH), or when the
 * CPU lacks one of GPT_CPU_SKYLAKEX_SET. Else, on a CPU with GPT_CPU_AVX512_HALVES,
 * "Haswell" when the library runs AVX-512 kernels (NULL when it runs others); on any other,
 * "SkylakeX" when it does not (NULL when it does): the fp32 SGEMM the trainers call is the
 * same kernel on Cooperlake (which adds only bf16 ones), and DYNAMIC_ARCH builds knew
 * SkylakeX long before Cooperlake and SapphireRapids came. Pure: reads nothing but f. */
const char *gpt_blas_pick_core(const gpt_blas_facts *f);

/* 1 when the user's OPENBLAS_CORETYPE (f->env_coretype, weft's marker unset) holds a
 * DYNAMIC_ARCH library to kernels without AVX-512 on a CPU with GPT_CPU_SKYLAKEX_SET and
 * without GPT_CPU_AVX512_HALVES:
 * gpt_blas_describe then tells how to get them (one core's SGEMM at about twice the rate:
 * Haswell 77-91 against 186-204 GFLOP/s at 512^3 on the AMD EPYC VM of 2026-11-30, whose
 * AVX-512 is full width). Pure: reads nothing but f. */
int gpt_blas_user_core_forgoes_avx512(const gpt_blas_facts *f);

/* The GPT_CPU_* bits of this CPU (GCC's __builtin_cpu_supports, which checks that the OS
 * saves the AVX-512 registers too; GPT_CPU_AVX512_HALVES from __builtin_cpu_is: an AMD
 * CPU of family 25 with AVX-512F). */
unsigned gpt_blas_cpu_flags(void);

/* Call first in main(), before any thread or file the program makes: re-executes the
 * program (/proc/self/exe with argv) when gpt_blas_pick_core says so, and returns
 * otherwise. If the re-execution fails the variables are removed again, the program goes
 * on with the kernels OpenBLAS picked and gpt_blas_describe says why. */
void gpt_blas_choose(char **argv);

/* One phrase for the start-up line, into buf (always terminated): "OpenBLAS 0.3.21 core
 * SkylakeX (chosen by weft: OpenBLAS picked Haswell, the CPU has AVX-512)", "... core
 * Haswell (OPENBLAS_CORETYPE=Haswell in the environment)" (with, where
 * gpt_blas_user_core_forgoes_avx512 holds, "; this CPU runs OpenBLAS's AVX-512 kernels,
 * about twice the SGEMM rate: unset it and weft chooses SkylakeX"), "... core SkylakeX
 * (OpenBLAS's own choice)". */
void gpt_blas_describe(char *buf, size_t len);

#endif

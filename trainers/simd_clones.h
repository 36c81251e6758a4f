/* trainers/simd_clones.h: SIMD_CLONES, for the trainers' kernels that stream memory or
 * work element by element (adamw.c; backend_cpu.c's element-wise kernels, LayerNorm and
 * attention): each is compiled for AVX-512 and AVX2 too, and the loader picks the best the
 * CPU has (GCC's target_clones). Results may then differ in the last bits between CPUs (FMA
 * contraction, and a sum's lane count), never between runs on one machine. */
#ifndef WEFT_TRAINERS_SIMD_CLONES_H
#define WEFT_TRAINERS_SIMD_CLONES_H

#define SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

#endif

/* trainers/backend_cpu.h: what the CPU backend offers beyond the gpt_backend table.
 *
 * Causal attention of all (sequence, head) pairs of a block in one call, with the layouts of
 * gpt.h (qkv [B*T, 3d] with head h at columns h*hd of q, k and v; probs [B, H, T, T]; atty
 * and datty [B*T, d]). Unlike the four sgemm calls per head and direction it replaces, it
 * computes only the causal lower triangle of Q K^T, P V and their gradients (half the
 * FLOPs; the PaLM formula still counts the full square), fuses the softmax into the row
 * blocks while they are in cache, and never calls OpenBLAS on 128 x 64 matrices, where its
 * per-call packing costs as much as the product. gpt.c uses these when its backend is the
 * CPU one and falls back to gemm + softmax_causal_* otherwise (or when these return -1: out
 * of memory for the per-call workspace). probs is written on and below the diagonal only;
 * above it stays as it was (zero from gpt_model_create).
 *
 * A second backend (CUDA) would put the same two operations in gpt_backend; until backend.h
 * has them, this header is the CPU backend's extension.
 */
#ifndef WEFT_TRAINERS_BACKEND_CPU_H
#define WEFT_TRAINERS_BACKEND_CPU_H

#include "trainers/backend.h"

/* 1 when be is gpt_backend_cpu()'s table. */
int gpt_backend_is_cpu(const gpt_backend *be);

/* P = causal softmax(scale Q K^T), Y = P V for every (b, h). Returns 0, or -1 (no memory,
 * nothing written). */
int gpt_cpu_attention_fwd(const float *qkv, float *probs, float *atty, int B, int T, int H, int hd, float scale);

/* From datty: dS = softmax_bwd(P, dY V^T), dq = dS K, dk = dS^T Q, dv = P^T dY, written
 * (not accumulated) into dqkv [B*T, 3d]. Returns 0, or -1 (no memory, nothing written). */
int gpt_cpu_attention_bwd(const float *qkv, const float *probs, const float *datty, float *dqkv, int B, int T,
                          int H, int hd, float scale);

#endif

/* nccl_premul.c: ncclRedOpCreatePreMulSum / ncclRedOpDestroy.
 * A PreMulSum op multiplies every rank's input by the op's scalar, then sums: here the
 * input is scaled into a temporary copy, on the device by nccl_kernels.cu in the call's
 * stream when the input is device memory, on the host otherwise (integers wrap as weft's sum
 * does; fp16 and bf16 are scaled in fp32 and rounded to nearest-even, as weft reduces them),
 * and the copy is summed with WEFT_SUM. Op values are ncclNumOps + slot, per communicator. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "lib/dtype.h"
#include "mem/kernels.h"
#include "nccl/nccl_internal.h"

NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
         ncclScalarResidence_t residence, ncclComm_t comm) {
  ncclResult_t r = nccl__check_comm(comm, "ncclRedOpCreatePreMulSum");
  weft_datatype_t wdt;
  if (r == ncclSuccess) r = nccl__dtype(datatype, &wdt, "ncclRedOpCreatePreMulSum");
  if (r != ncclSuccess) return r;
  if (op == NULL || scalar == NULL || (residence != ncclScalarDevice && residence != ncclScalarHostImmediate))
    return nccl__fail(ncclInvalidArgument, "rank %d: ncclRedOpCreatePreMulSum: NULL op or scalar, or residence %d",
                      comm->rank, (int)residence);
  pthread_mutex_lock(&comm->mu);
  int slot = 0;
  while (slot < NCCL__MAX_PREMUL && comm->premul[slot].used) slot++;
  if (slot < NCCL__MAX_PREMUL) {
    nccl__premul *p = &comm->premul[slot];
    memset(p, 0, sizeof(*p));
    p->used = 1, p->datatype = datatype;
    if (residence == ncclScalarHostImmediate) memcpy(p->scalar, scalar, weft_datatype_size(wdt));
    else p->scalar_ptr = scalar;
  }
  pthread_mutex_unlock(&comm->mu);
  if (slot == NCCL__MAX_PREMUL)
    return nccl__fail(ncclInvalidUsage, "rank %d: ncclRedOpCreatePreMulSum: more than %d ops alive on one "
                      "communicator", comm->rank, NCCL__MAX_PREMUL);
  *op = (ncclRedOp_t)(ncclNumOps + slot);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  if (comm == NULL) return nccl__fail(ncclInvalidArgument, "ncclRedOpDestroy: comm is NULL");
  int slot = (int)op - ncclNumOps;
  pthread_mutex_lock(&comm->mu);
  int ok = slot >= 0 && slot < NCCL__MAX_PREMUL && comm->premul[slot].used;
  if (ok) comm->premul[slot].used = 0;
  pthread_mutex_unlock(&comm->mu);
  if (!ok)
    return nccl__fail(ncclInvalidArgument, "rank %d: ncclRedOpDestroy: op %d was not made by "
                      "ncclRedOpCreatePreMulSum on this communicator", comm->rank, (int)op);
  return ncclSuccess;
}

/* dst[i] = src[i] * s for count elements of dt (s: one element of dt). */
static void scale(void *dst, const void *src, size_t count, weft_datatype_t dt, const void *s) {
#define SCALE_INT(T)                                                                  \
  do {                                                                                \
    T f;                                                                              \
    memcpy(&f, s, sizeof(f));                                                         \
    for (size_t i = 0; i < count; i++) ((T *)dst)[i] = (T)(((const T *)src)[i] * f);  \
  } while (0)
  switch (dt) {
    case WEFT_INT8: case WEFT_UINT8: SCALE_INT(uint8_t); break;
    case WEFT_INT32: case WEFT_UINT32: SCALE_INT(uint32_t); break;
    case WEFT_INT64: case WEFT_UINT64: SCALE_INT(uint64_t); break;
    case WEFT_FLOAT32: SCALE_INT(float); break;
    case WEFT_FLOAT64: SCALE_INT(double); break;
    case WEFT_FLOAT16: {
      float f = weft__half_to_float(*(const uint16_t *)s);
      for (size_t i = 0; i < count; i++)
        ((uint16_t *)dst)[i] = weft__float_to_half(weft__half_to_float(((const uint16_t *)src)[i]) * f);
      break;
    }
    case WEFT_BFLOAT16: {
      float f = weft__bf16_to_float(*(const uint16_t *)s);
      for (size_t i = 0; i < count; i++)
        ((uint16_t *)dst)[i] = weft__float_to_bf16(weft__bf16_to_float(((const uint16_t *)src)[i]) * f);
      break;
    }
    default: break;
  }
#undef SCALE_INT
}

ncclResult_t nccl__resolve_op(struct ncclComm *comm, ncclRedOp_t op, ncclDataType_t dt, const void *input,
                              size_t count, cudaStream_t cs, weft_redop_t *wop, nccl__scaled *scaled,
                              const char *what) {
  memset(scaled, 0, sizeof(*scaled));
  if ((int)op >= 0 && (int)op < ncclNumOps) {
    *wop = (weft_redop_t)op; /* weft's op values are NCCL's */
    return ncclSuccess;
  }
  int slot = (int)op - ncclNumOps;
  unsigned char s[8];
  const void *sptr = NULL;
  pthread_mutex_lock(&comm->mu);
  int ok = slot >= 0 && slot < NCCL__MAX_PREMUL && comm->premul[slot].used && comm->premul[slot].datatype == dt;
  size_t es = weft_datatype_size((weft_datatype_t)dt);
  if (ok) sptr = comm->premul[slot].scalar_ptr, memcpy(s, comm->premul[slot].scalar, es);
  pthread_mutex_unlock(&comm->mu);
  if (!ok)
    return nccl__fail(ncclInvalidArgument, "rank %d: %s: op %d is neither a built-in op nor a PreMulSum op "
                      "of this communicator for datatype %d", comm->rank, what, (int)op, (int)dt);
  *wop = WEFT_SUM;
  if (count == 0) return ncclSuccess;
  if (input == NULL) return nccl__fail(ncclInvalidArgument, "rank %d: %s: sendbuff is NULL", comm->rank, what);
  /* Device input: scaled on the device in the call's stream order; the scalar (ncclScalarDevice)
   * is read there when it is device memory, on the host when it is host memory. */
  if (nccl__cuda_is_device(input)) {
    scaled->on_device = 1, scaled->cs = cs;
    return nccl__cuda_scale(&scaled->p, input, count, (weft_datatype_t)dt, sptr, s, cs, what);
  }
  if (sptr != NULL) {
    if (nccl__cuda_is_device(sptr)) {
      if (nccl__cuda_read(s, sptr, es) != 0)
        return nccl__fail(ncclUnhandledCudaError, "rank %d: %s: cannot read the PreMulSum scalar at %p", comm->rank,
                          what, sptr);
    } else {
      memcpy(s, sptr, es); /* ncclScalarDevice on host memory: read at each call */
    }
  }
  scaled->p = malloc(count * es);
  if (scaled->p == NULL)
    return nccl__fail(ncclSystemError, "rank %d: %s: out of memory for the scaled input", comm->rank, what);
  scale(scaled->p, input, count, (weft_datatype_t)dt, s);
  return ncclSuccess;
}

void nccl__scaled_release(nccl__scaled *scaled) {
  if (scaled->on_device) nccl__cuda_free_async(scaled->p, scaled->cs);
  else free(scaled->p);
  scaled->p = NULL;
}

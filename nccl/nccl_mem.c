/* nccl_mem.c: NCCL's memory calls on weft: ncclMemAlloc/Free (memory peers can map),
 * buffer registration (weft_comm_register: local, direct collectives within a host when
 * every rank registers) and windows (weft_comm_window_register: collective). */
#include <stdint.h>
#include <stdlib.h>
#include "nccl/nccl_internal.h"
#ifdef WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "weft_cuda.h"
#endif

/* As NCCL's, device memory of the current device where a CUDA device is present (with
 * WEFT_HAVE_CUDA; weft_mem_alloc_device, which also arms weft's device-pointer recognition);
 * host memory that peers can map where there is none, or when WEFT_NCCL_MEM=host (a program
 * that, against NCCL's contract, touches ncclMemAlloc's memory on the host). weft_mem_free
 * frees either. */
NCCL_API(ncclResult_t, ncclMemAlloc, void **ptr, size_t size) {
#ifdef WEFT_HAVE_CUDA
  if (ptr != NULL && size > 0 && nccl__cuda_mem_device()) return nccl__from_weft(weft_mem_alloc_device(ptr, size));
#endif
  return nccl__from_weft(weft_mem_alloc(ptr, size));
}

NCCL_API(ncclResult_t, ncclMemFree, void *ptr) { return nccl__from_weft(weft_mem_free(ptr)); }

/* Local registration: weft_comm_register, whose handle is the registration itself. */
NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void *buff, size_t size, void **handle) {
  ncclResult_t r = nccl__check_comm(comm, "ncclCommRegister");
  if (r != ncclSuccess) return r;
  weft_reg_t reg = NULL;
  weft_status_t st = weft_comm_register(comm->w, buff, size, handle == NULL ? NULL : &reg);
  if (handle != NULL) *handle = reg;
  return nccl__from_weft(st);
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void *handle) {
  ncclResult_t r = nccl__check_comm(comm, "ncclCommDeregister");
  if (r != ncclSuccess) return r;
  if (handle == NULL)
    return nccl__fail(ncclInvalidArgument, "rank %d: ncclCommDeregister: NULL handle", comm->rank);
  return nccl__from_weft(weft_comm_deregister(comm->w, (weft_reg_t)handle));
}

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
         int winFlags) {
  ncclResult_t r = nccl__check_comm(comm, "ncclCommWindowRegister");
  if (r != ncclSuccess) return r;
  if (winFlags != NCCL_WIN_DEFAULT && winFlags != NCCL_WIN_COLL_SYMMETRIC)
    return nccl__fail(ncclInvalidArgument, "rank %d: ncclCommWindowRegister: unknown flags 0x%x", comm->rank, winFlags);
  weft_window_t w = NULL;
  weft_status_t st = weft_comm_window_register(comm->w, buff, size, win == NULL ? NULL : &w, 0);
  if (win != NULL) *win = (ncclWindow_t)w;
  return nccl__from_weft(st);
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  ncclResult_t r = nccl__check_comm(comm, "ncclCommWindowDeregister");
  if (r != ncclSuccess) return r;
  return nccl__from_weft(weft_comm_window_deregister(comm->w, (weft_window_t)win));
}

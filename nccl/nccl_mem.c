/* nccl_mem.c: NCCL's memory calls on weft: ncclMemAlloc/Free (memory peers can map),
 * buffer registration (a local handle: host collectives need none) and windows
 * (weft_comm_window_register: direct collectives within a host). */
#include <stdint.h>
#include <stdlib.h>
#include "nccl/nccl_internal.h"

NCCL_API(ncclResult_t, ncclMemAlloc, void **ptr, size_t size) {
  return nccl__from_weft(weft_mem_alloc(ptr, size));
}

NCCL_API(ncclResult_t, ncclMemFree, void *ptr) { return nccl__from_weft(weft_mem_free(ptr)); }

#define REG_MAGIC 0x77656674726567ull /* "weftreg" */
typedef struct {
  uint64_t magic;
  const struct ncclComm *comm;
  void *buff;
  size_t size;
} reg_handle;

NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void *buff, size_t size, void **handle) {
  ncclResult_t r = nccl__check_comm(comm, "ncclCommRegister");
  if (r != ncclSuccess) return r;
  if (buff == NULL || size == 0 || handle == NULL)
    return nccl__fail(ncclInvalidArgument, "rank %d: ncclCommRegister: NULL buff or handle, or size 0", comm->rank);
  reg_handle *h = malloc(sizeof(*h));
  if (h == NULL) return nccl__fail(ncclSystemError, "rank %d: ncclCommRegister: out of memory", comm->rank);
  h->magic = REG_MAGIC, h->comm = comm, h->buff = buff, h->size = size;
  *handle = h;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void *handle) {
  ncclResult_t r = nccl__check_comm(comm, "ncclCommDeregister");
  if (r != ncclSuccess) return r;
  reg_handle *h = handle;
  if (h == NULL || h->magic != REG_MAGIC || h->comm != comm)
    return nccl__fail(ncclInvalidArgument, "rank %d: ncclCommDeregister: handle not from ncclCommRegister on "
                      "this communicator", comm->rank);
  h->magic = 0;
  free(h);
  return ncclSuccess;
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

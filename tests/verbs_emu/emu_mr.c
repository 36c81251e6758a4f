/* emu_mr.c: memory regions. Each context's table lives in its shared file so that a
 * requester in another process checks the rkey, the bounds and the access flags of the
 * target region itself, as the responder HCA would. A key is (index << 8 | generation):
 * a key of a deregistered region stops working even when its slot is reused. lkey == rkey. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "emu.h"
#undef ibv_reg_mr

static pthread_mutex_t g_mr_lock = PTHREAD_MUTEX_INITIALIZER;

static struct ibv_mr *reg(struct ibv_pd *pd, void *addr, size_t length, int access) {
  emu_context *c = emu_ctx(pd->context);
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
    errno = EINVAL; /* as the verbs spec: remote write needs local write */
    return NULL;
  }
  if (length > EMU_MAX_MSG || (addr == NULL && length > 0)) {
    errno = EINVAL;
    return NULL;
  }
  struct ibv_mr *mr = calloc(1, sizeof(*mr));
  if (mr == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  pthread_mutex_lock(&g_mr_lock);
  int idx = -1;
  for (int i = 0; i < EMU_MAX_MR && idx < 0; i++)
    if (!c->sh->mr[i].valid) idx = i;
  if (idx < 0) {
    pthread_mutex_unlock(&g_mr_lock);
    free(mr);
    errno = ENOMEM;
    return NULL;
  }
  emu_mr_entry *e = &c->sh->mr[idx];
  e->key = ((uint32_t)idx << 8) | ((e->key + 1) & 0xff);
  e->pd = pd->handle;
  e->access = (uint32_t)access;
  e->addr = (uint64_t)(uintptr_t)addr;
  e->length = length;
  __atomic_store_n(&e->valid, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&g_mr_lock);
  mr->context = pd->context;
  mr->pd = pd;
  mr->addr = addr;
  mr->length = length;
  mr->handle = (uint32_t)idx;
  mr->lkey = mr->rkey = e->key;
  return mr;
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access) {
  return reg(pd, addr, length, access);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                unsigned int access) {
  if (iova != (uint64_t)(uintptr_t)addr) {
    errno = EOPNOTSUPP; /* the emulator addresses regions by virtual address only */
    return NULL;
  }
  return reg(pd, addr, length, (int)access);
}

int ibv_dereg_mr(struct ibv_mr *mr) {
  emu_context *c = emu_ctx(mr->context);
  emu_mr_entry *e = &c->sh->mr[mr->handle];
  __atomic_store_n(&e->valid, 0, __ATOMIC_RELEASE);
  free(mr);
  return 0;
}

int emu_mr_check(const emu_shared *sh, uint32_t pd, uint32_t key, uint64_t addr, uint64_t len,
                 uint32_t need_access) {
  uint32_t idx = key >> 8;
  if (idx >= EMU_MAX_MR) return -1;
  const emu_mr_entry *e = &sh->mr[idx];
  if (!__atomic_load_n(&e->valid, __ATOMIC_ACQUIRE) || e->key != key || e->pd != pd) return -1;
  if (addr < e->addr || len > e->length || addr - e->addr > e->length - len) return -1;
  if ((e->access & need_access) != need_access) return -1;
  return 0;
}

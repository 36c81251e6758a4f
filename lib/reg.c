/* reg.c: weft_comm_register / weft_comm_deregister and the cache of peers' registrations
 * imported here (lib/reg.h says how they are used). */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "lib/comm.h"
#include "lib/env.h"
#include "lib/log.h"
#include "lib/reg.h"
#include "lib/status.h"
#include "lib/window.h"
#include "transports/transport.h"

/* A peer's registration mapped here. */
typedef struct weft__reg_import_slot {
  int32_t pid;        /* 0: a free slot */
  uint64_t serial;
  uint64_t last_use;  /* comm->reg_clock when last resolved */
  weft__mem_mapping map;
} import_slot;

static atomic_ulong reg_serial;

struct weft_reg *weft__reg_find(struct weft_comm *comm, const void *p, size_t bytes) {
  const char *a = p;
  for (struct weft_reg *r = comm->regs; r != NULL; r = r->next)
    if (r->direct && p != NULL && a >= r->base && weft__span_fits((size_t)(a - r->base), bytes, r->bytes)) return r;
  return NULL;
}

/* Whether comm could run a direct collective at all: more than one rank, all reached by a
 * transport that maps peers' memory (shm), WEFT_DIRECT not 0 here. */
static int comm_can_go_direct(const struct weft_comm *comm) {
  return comm->nranks > 1 && (comm->caps_all & WEFT__TRANSPORT_CAP_PEER_MEMORY) != 0 &&
         weft__env_long("WEFT_DIRECT", 1) != 0;
}

static void reg_free(struct weft_reg *r) {
  weft__host_adopt_release(r->adopted);
  free(r);
}

weft_status_t weft_comm_register(weft_comm_t comm, void *buff, size_t size, weft_reg_t *handle) {
  if (comm == NULL) return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_comm_register: comm is NULL");
  if (handle != NULL) *handle = NULL;
  if (buff == NULL || size == 0 || handle == NULL)
    return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT, "rank %d: weft_comm_register: %s", comm->rank,
                       buff == NULL ? "buff is NULL" : size == 0 ? "size is 0" : "handle is NULL");
  WEFT_TRY(weft__comm_wait_ready(comm));
  struct weft_reg *r = calloc(1, sizeof *r);
  if (r == NULL) return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: weft_comm_register: out of memory", comm->rank);
  r->comm = comm;
  r->base = buff;
  r->bytes = size;
  r->serial = atomic_fetch_add(&reg_serial, 1) + 1;
  const weft__mem_space *space = weft__mem_space_of(buff);
  /* Host memory must be shareable where the communicator can go direct, so every rank that
   * registers decides alike; other kinds (device memory) register as a no-op, as the
   * direct algorithms take host memory only from registrations. */
  if (space == &weft__mem_host && comm_can_go_direct(comm)) {
    int outcome = space->export_buf(space, buff, size, &r->handle)
                      ? 0 : weft__host_adopt_export(buff, size, &r->adopted, &r->handle);
    if (outcome != 0) {
      weft_status_t st = weft__error(comm, WEFT_ERR_INVALID_ARGUMENT, "rank %d: weft_comm_register: %p (%zu bytes) "
                                     "%s%s%s", comm->rank, buff, size, weft__host_adopt_why(outcome),
                                     outcome > 0 ? ": " : "", outcome > 0 ? strerror(outcome) : "");
      reg_free(r);
      return st;
    }
    r->direct = 1;
  }
  size_t min = weft__env_size("WEFT_DIRECT_MIN_BYTES", WEFT__DIRECT_MIN_BYTES_DEFAULT);
  weft__op_lock_take(&comm->lock);
  r->next = comm->regs;
  comm->regs = r;
  comm->reg_min_bytes = min;
  weft__op_lock_release(&comm->lock);
  *handle = r;
  return WEFT_SUCCESS;
}

weft_status_t weft_comm_deregister(weft_comm_t comm, weft_reg_t handle) {
  if (comm == NULL) return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_comm_deregister: comm is NULL");
  if (handle == NULL) return WEFT_SUCCESS;
  weft__op_lock_take(&comm->lock);
  struct weft_reg **at = &comm->regs;
  while (*at != NULL && *at != handle) at = &(*at)->next;
  struct weft_reg *r = *at;
  if (r != NULL) *at = r->next;
  weft__op_lock_release(&comm->lock);
  if (r == NULL)
    return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT,
                       "rank %d: weft_comm_deregister: the handle is not a registration of this communicator",
                       comm->rank);
  reg_free(r);
  return WEFT_SUCCESS;
}

void weft__reg_free_all(struct weft_comm *comm) {
  while (comm->regs != NULL) {
    struct weft_reg *r = comm->regs;
    comm->regs = r->next;
    reg_free(r);
  }
  for (size_t i = 0; comm->reg_imports != NULL && i < (size_t)comm->nranks * WEFT__REG_IMPORTS; i++)
    weft__mem_host.unimport(&weft__mem_host, &comm->reg_imports[i].map);
  free(comm->reg_imports);
  comm->reg_imports = NULL;
}

char *weft__reg_import(struct weft_comm *comm, int j, uint64_t serial, const weft__mem_handle *h, int *err) {
  *err = 0;
  if (comm->reg_imports == NULL) {
    comm->reg_imports = calloc((size_t)comm->nranks * WEFT__REG_IMPORTS, sizeof *comm->reg_imports);
    if (comm->reg_imports == NULL) {
      *err = ENOMEM;
      return NULL;
    }
  }
  import_slot *slots = comm->reg_imports + (size_t)j * WEFT__REG_IMPORTS, *lru = &slots[0];
  uint64_t now = ++comm->reg_clock;
  for (int k = 0; k < WEFT__REG_IMPORTS; k++) {
    import_slot *s = &slots[k];
    if (s->pid == h->pid && s->serial == serial && s->pid != 0) {
      s->last_use = now;
      return s->map.base;
    }
    if (s->last_use < lru->last_use) lru = s; /* free slots have 0: taken first */
  }
  weft__mem_host.unimport(&weft__mem_host, &lru->map);
  memset(lru, 0, sizeof *lru);
  if ((*err = weft__mem_host.import_buf(&weft__mem_host, h, &lru->map)) != 0) return NULL;
  lru->pid = h->pid;
  lru->serial = serial;
  lru->last_use = now;
  return lru->map.base;
}

int weft__reg_imports_held(const struct weft_comm *comm, int j) {
  int held = 0;
  for (int k = 0; comm->reg_imports != NULL && k < WEFT__REG_IMPORTS; k++)
    held += comm->reg_imports[(size_t)j * WEFT__REG_IMPORTS + k].pid != 0;
  return held;
}

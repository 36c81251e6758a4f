/* algo.c: the communicator services every algorithm may use (lib/algo.h): its state inside
 * the task when it fits, and the communicator's kept scratch. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "lib/algo.h"
#include "lib/comm.h"
#include "lib/status.h"

void *weft__comm_scratch(weft__task *t, size_t bytes, weft_status_t *st) {
  struct weft_comm *c = t->comm;
  if (bytes > c->scratch_bytes) {
    void *p = malloc(bytes);
    if (p == NULL) {
      *st = weft__error(c, WEFT_ERR_NO_MEMORY, "rank %d: %s %s: cannot allocate %zu bytes of scratch", c->rank,
                        weft__coll_name(t->coll), t->algo ? t->algo->name : "algorithm", bytes);
      return NULL;
    }
    free(c->scratch);
    c->scratch = p;
    c->scratch_bytes = bytes;
  }
  *st = WEFT_SUCCESS;
  return c->scratch;
}

void *weft__algo_state_take(weft__task *t, size_t hdr, size_t extra, weft_status_t *st) {
  if (extra <= sizeof(t->state_inline) && hdr <= sizeof(t->state_inline) - extra) {
    t->state = t->state_inline;
    *st = WEFT_SUCCESS;
    return t->state;
  }
  void *p = extra <= SIZE_MAX - hdr ? malloc(hdr + extra) : NULL;
  if (p == NULL) {
    *st = weft__error(t->comm, WEFT_ERR_NO_MEMORY,
                      "rank %d: %s %s: cannot allocate %zu + %zu bytes of state and scratch",
                      t->comm->rank, weft__coll_name(t->coll),
                      t->algo ? t->algo->name : "algorithm", hdr, extra);
    return NULL;
  }
  t->state = p;
  *st = WEFT_SUCCESS;
  return p;
}

void *weft__algo_state_alloc(weft__task *t, size_t hdr, size_t extra, weft_status_t *st) {
  void *p = weft__algo_state_take(t, hdr, extra, st);
  if (p != NULL) memset(p, 0, hdr + extra);
  return p;
}

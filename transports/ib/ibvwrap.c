/* ibvwrap.c: loading libibverbs (or WEFT_IB_LIBRARY) with dlopen and filling weft__ibv.
 * See ibvwrap.h. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transports/ib/ibvwrap.h"

static weft__ibv g_ibv;
static const weft__ibv *g_loaded;
static char g_why[512];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* dlsym into *slot; 0, or -1 after writing why. */
static int sym(void *h, const char *name, void *slot) {
  void *p = dlsym(h, name);
  if (p == NULL) {
    snprintf(g_why, sizeof(g_why), "%s lacks %s", g_ibv.path, name);
    return -1;
  }
  memcpy(slot, &p, sizeof(p));
  return 0;
}

static int resolve(void *h) {
  weft__ibv *t = &g_ibv;
  return sym(h, "ibv_get_device_list", &t->get_device_list) | sym(h, "ibv_free_device_list", &t->free_device_list) |
         sym(h, "ibv_get_device_name", &t->get_device_name) | sym(h, "ibv_open_device", &t->open_device) |
         sym(h, "ibv_close_device", &t->close_device) | sym(h, "ibv_get_async_event", &t->get_async_event) |
         sym(h, "ibv_ack_async_event", &t->ack_async_event) | sym(h, "ibv_query_device", &t->query_device) |
         sym(h, "ibv_query_port", &t->query_port_compat) | sym(h, "ibv_query_gid", &t->query_gid) |
         sym(h, "ibv_alloc_pd", &t->alloc_pd) | sym(h, "ibv_dealloc_pd", &t->dealloc_pd) |
         sym(h, "ibv_reg_mr", &t->reg_mr) | sym(h, "ibv_dereg_mr", &t->dereg_mr) |
         sym(h, "ibv_create_cq", &t->create_cq) | sym(h, "ibv_destroy_cq", &t->destroy_cq) |
         sym(h, "ibv_create_qp", &t->create_qp) | sym(h, "ibv_modify_qp", &t->modify_qp) |
         sym(h, "ibv_destroy_qp", &t->destroy_qp) | sym(h, "ibv_wc_status_str", &t->wc_status_str) |
         sym(h, "ibv_event_type_str", &t->event_type_str);
}

static void load(void) {
  const char *want = getenv("WEFT_IB_LIBRARY");
  const char *names[] = {want, "libibverbs.so.1", "libibverbs.so"};
  int first = want != NULL && want[0] != '\0' ? 0 : 1, last = first == 0 ? 0 : 2;
  void *h = NULL;
  for (int i = first; i <= last && h == NULL; i++) {
    h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    snprintf(g_ibv.path, sizeof(g_ibv.path), "%s", names[i]);
    if (h == NULL) snprintf(g_why, sizeof(g_why), "cannot load %s: %s", names[i], dlerror());
  }
  if (h == NULL) return;
  g_ibv.handle = h;
  if (resolve(h) != 0) return; /* g_why names the missing symbol; the library stays loaded */
  g_loaded = &g_ibv;
}

const weft__ibv *weft__ibv_get(const char **why) {
  pthread_once(&g_once, load);
  if (g_loaded == NULL && why != NULL) *why = g_why;
  return g_loaded;
}

int weft__ibv_query_port(const weft__ibv *ibv, struct ibv_context *ctx, uint8_t port,
                         struct ibv_port_attr *attr) {
  memset(attr, 0, sizeof(*attr));
  return ibv->query_port_compat(ctx, port, attr);
}

/* ib_dev.c: discovery of the usable HCA ports, opened ports, the asynchronous-event thread
 * and the memory-registration cache (see ib_dev.h). */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "lib/log.h"
#include "lib/status.h"
#include "transports/ib/ib_config.h"
#include "transports/ib/ib_dev.h"

static weft__ib_port_info g_ports[WEFT__IB_MAX_PORTS];
static int g_nports;
static char g_why[512];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static weft__ib_dev *g_open[WEFT__IB_MAX_PORTS];
static pthread_mutex_t g_open_lock = PTHREAD_MUTEX_INITIALIZER;

int weft__ib_speed_mbps(int speed, int width) {
  int lane = 0, lanes = 0;
  switch (speed) {
    case 1: lane = 2500; break;    /* SDR */
    case 2: lane = 5000; break;    /* DDR */
    case 4: case 8: lane = 10000; break; /* QDR, FDR10 */
    case 16: lane = 14000; break;  /* FDR */
    case 32: lane = 25000; break;  /* EDR */
    case 64: lane = 50000; break;  /* HDR */
    case 128: lane = 100000; break; /* NDR */
    case 256: lane = 200000; break; /* XDR */
    default: return 0;
  }
  switch (width) {
    case 1: lanes = 1; break;
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    case 16: lanes = 2; break;
    default: return 0;
  }
  return lane * lanes;
}

/* PCI address, path and NUMA node from ibdev_path/device (a link into /sys/devices). */
static void pci_locality(const char *ibdev_path, weft__ib_port_info *p) {
  char link[PATH_MAX + 16], real[PATH_MAX];
  p->numa = -1;
  snprintf(link, sizeof(link), "%s/device", ibdev_path);
  if (realpath(link, real) == NULL) return;
  size_t n = strlen(real);
  if (n < sizeof(p->pci_path)) memcpy(p->pci_path, real, n + 1);
  const char *base = strrchr(real, '/');
  unsigned a, b, c, d;
  if (base != NULL && sscanf(base + 1, "%x:%x:%x.%x", &a, &b, &c, &d) == 4)
    snprintf(p->pci, sizeof(p->pci), "%s", base + 1);
  snprintf(link, sizeof(link), "%s/numa_node", real);
  FILE *f = fopen(link, "r");
  if (f != NULL) {
    if (fscanf(f, "%d", &p->numa) != 1 || p->numa < 0) p->numa = -1;
    fclose(f);
  }
}

/* The GID to use: the configured index, else 0 on IB and the first IPv4-mapped on RoCE. */
static int pick_gid(const weft__ibv *ibv, struct ibv_context *ctx, int port, const struct ibv_port_attr *pa,
                    weft__ib_port_info *p) {
  int want = weft__ib_config_get()->gid_index;
  if (p->link_ib || want >= 0) {
    p->gid_index = p->link_ib && want < 0 ? 0 : want;
    return ibv->query_gid(ctx, (uint8_t)port, p->gid_index, &p->gid);
  }
  static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  for (int i = 0; i < pa->gid_tbl_len; i++) {
    union ibv_gid g;
    if (ibv->query_gid(ctx, (uint8_t)port, i, &g) == 0 && memcmp(g.raw, v4mapped, 12) == 0) {
      p->gid_index = i;
      p->gid = g;
      return 0;
    }
  }
  p->gid_index = 0;
  return ibv->query_gid(ctx, (uint8_t)port, 0, &p->gid);
}

static void add_ports(const weft__ibv *ibv, struct ibv_device *dev) {
  const char *name = ibv->get_device_name(dev);
  struct ibv_context *ctx = ibv->open_device(dev);
  struct ibv_device_attr da;
  if (ctx == NULL) {
    WEFT_INFO("ib: cannot open %s: %s; skipped", name, strerror(errno));
    return;
  }
  if (ibv->query_device(ctx, &da) != 0) da.phys_port_cnt = 0;
  for (int port = 1; port <= da.phys_port_cnt && g_nports < WEFT__IB_MAX_PORTS; port++) {
    struct ibv_port_attr pa;
    if (weft__ibv_query_port(ibv, ctx, (uint8_t)port, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) continue;
    if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND && pa.link_layer != IBV_LINK_LAYER_ETHERNET) continue;
    if (!weft__ib_hca_match(&weft__ib_config_get()->hca, name, port)) continue;
    weft__ib_port_info *p = &g_ports[g_nports];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->port = port;
    p->link_ib = pa.link_layer == IBV_LINK_LAYER_INFINIBAND;
    p->speed_mbps = weft__ib_speed_mbps(pa.active_speed, pa.active_width);
    p->lid = pa.lid;
    p->mtu = pa.active_mtu;
    pci_locality(dev->ibdev_path, p);
    if (pick_gid(ibv, ctx, port, &pa, p) != 0) continue;
    g_nports++;
  }
  ibv->close_device(ctx);
}

static void discover(void) {
  const char *why = NULL;
  if (weft__ib_config_get()->disable) {
    snprintf(g_why, sizeof(g_why), "disabled by WEFT_IB_DISABLE=1");
  } else {
    const weft__ibv *ibv = weft__ibv_get(&why);
    if (ibv == NULL) {
      snprintf(g_why, sizeof(g_why), "%s", why);
    } else {
      int n = 0;
      struct ibv_device **list = ibv->get_device_list(&n);
      for (int i = 0; list != NULL && i < n; i++) add_ports(ibv, list[i]);
      if (list != NULL) ibv->free_device_list(list);
      if (g_nports == 0)
        snprintf(g_why, sizeof(g_why), "%s lists %d RDMA device%s and no active port %s", ibv->path, n,
                 n == 1 ? "" : "s", weft__ib_config_get()->hca.n ? "that WEFT_IB_HCA selects" : "with an IB or RoCE link");
    }
  }
  if (g_nports == 0) WEFT_INFO("ib: transport unavailable: %s", g_why);
  for (int i = 0; i < g_nports; i++)
    WEFT_INFO("ib: %s:%d %s %d Gb/s NUMA %d PCI %s LID %u GID index %d", g_ports[i].name, g_ports[i].port,
              g_ports[i].link_ib ? "IB" : "RoCE", g_ports[i].speed_mbps / 1000, g_ports[i].numa,
              g_ports[i].pci[0] ? g_ports[i].pci : "-", g_ports[i].lid, g_ports[i].gid_index);
}

int weft__ib_ports(const weft__ib_port_info **ports, const char **why) {
  pthread_once(&g_once, discover);
  if (ports != NULL) *ports = g_ports;
  if (why != NULL) *why = g_why;
  return g_nports;
}

/* ---- the asynchronous-event thread ---- */
static int is_error_event(enum ibv_event_type t) {
  switch (t) {
    case IBV_EVENT_CQ_ERR: case IBV_EVENT_QP_FATAL: case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR: case IBV_EVENT_PORT_ERR: case IBV_EVENT_DEVICE_FATAL:
    case IBV_EVENT_SRQ_ERR:
      return 1;
    default: return 0;
  }
}

static int qp_event(enum ibv_event_type t) {
  return t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR || t == IBV_EVENT_QP_ACCESS_ERR;
}

static void record_event(weft__ib_dev *d, const struct ibv_async_event *ev) {
  const char *what = d->ibv->event_type_str(ev->event_type);
  if (is_error_event(ev->event_type) && !d->fatal_set) {
    d->fatal_qpn = qp_event(ev->event_type) && ev->element.qp ? ev->element.qp->qp_num : 0;
    snprintf(d->fatal, sizeof(d->fatal), "%s:%d raised the asynchronous event '%s' (%d)%s", d->info->name,
             d->info->port, what, ev->event_type, d->fatal_qpn ? " on one of its QPs" : "");
    __atomic_store_n(&d->fatal_set, 1, __ATOMIC_RELEASE);
    WEFT_WARN("ib: %s", d->fatal);
  } else {
    WEFT_INFO("ib: %s:%d: asynchronous event '%s' (%d)", d->info->name, d->info->port, what, ev->event_type);
  }
}

void weft__ib_dev_drain_events(weft__ib_dev *d) {
  pthread_mutex_lock(&d->event_lock); /* one reader: a read only follows a readable poll */
  struct pollfd p = {.fd = d->ctx->async_fd, .events = POLLIN};
  struct ibv_async_event ev;
  while (poll(&p, 1, 0) == 1 && d->ibv->get_async_event(d->ctx, &ev) == 0) {
    record_event(d, &ev);
    d->ibv->ack_async_event(&ev);
  }
  pthread_mutex_unlock(&d->event_lock);
}

/* Waits on the context's async fd (100 ms at a time, so close can stop it) and records the
 * first error event; others are logged at INFO. As NCCL's async thread. */
static void *async_main(void *arg) {
  weft__ib_dev *d = arg;
  while (!__atomic_load_n(&d->async_stop, __ATOMIC_ACQUIRE)) {
    struct pollfd p = {.fd = d->ctx->async_fd, .events = POLLIN};
    if (poll(&p, 1, 100) == 1) weft__ib_dev_drain_events(d);
  }
  return NULL;
}

const char *weft__ib_dev_fatal(const weft__ib_dev *d, const uint32_t *qpn, int n) {
  if (!__atomic_load_n(&d->fatal_set, __ATOMIC_ACQUIRE)) return NULL;
  if (d->fatal_qpn == 0) return d->fatal;
  for (int i = 0; i < n; i++)
    if (qpn[i] == d->fatal_qpn) return d->fatal;
  return NULL;
}

/* ---- open / release ---- */
static weft_status_t open_port(int index, weft__ib_dev *d) {
  const weft__ib_port_info *ports;
  weft__ib_ports(&ports, NULL);
  d->index = index;
  d->info = &ports[index];
  d->ibv = weft__ibv_get(NULL);
  int n = 0;
  struct ibv_device **list = d->ibv->get_device_list(&n);
  for (int i = 0; list != NULL && i < n && d->ctx == NULL; i++)
    if (strcmp(d->ibv->get_device_name(list[i]), d->info->name) == 0) d->ctx = d->ibv->open_device(list[i]);
  if (list != NULL) d->ibv->free_device_list(list);
  if (d->ctx == NULL) return weft__error(NULL, WEFT_ERR_SYSTEM, "ib: cannot open %s: %s", d->info->name, strerror(errno));
  d->pd = d->ibv->alloc_pd(d->ctx);
  if (d->pd == NULL) return weft__error(NULL, WEFT_ERR_SYSTEM, "ib: %s: ibv_alloc_pd: %s", d->info->name, strerror(errno));
  pthread_mutex_init(&d->lock, NULL);
  pthread_mutex_init(&d->event_lock, NULL);
  int rc = pthread_create(&d->async_thread, NULL, async_main, d);
  if (rc != 0) return weft__error(NULL, WEFT_ERR_SYSTEM, "ib: %s: async thread: %s", d->info->name, strerror(rc));
  return WEFT_SUCCESS;
}

static void close_port(weft__ib_dev *d) {
  if (d->async_thread) {
    __atomic_store_n(&d->async_stop, 1, __ATOMIC_RELEASE);
    pthread_join(d->async_thread, NULL);
  }
  for (weft__ib_mr *m = d->mrs, *next; m != NULL; m = next) {
    next = m->next;
    d->ibv->dereg_mr(m->mr);
    free(m);
  }
  if (d->pd) d->ibv->dealloc_pd(d->pd);
  if (d->ctx) d->ibv->close_device(d->ctx);
  free(d);
}

weft_status_t weft__ib_dev_open(int index, weft__ib_dev **out) {
  *out = NULL;
  if (index < 0 || index >= weft__ib_ports(NULL, NULL))
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "ib: no usable port %d (%d found)", index, weft__ib_ports(NULL, NULL));
  pthread_mutex_lock(&g_open_lock);
  weft_status_t st = WEFT_SUCCESS;
  weft__ib_dev *d = g_open[index];
  if (d == NULL) {
    d = calloc(1, sizeof(*d));
    st = d == NULL ? WEFT_ERR_NO_MEMORY : open_port(index, d);
    if (st != WEFT_SUCCESS && d != NULL) close_port(d);
    g_open[index] = st == WEFT_SUCCESS ? d : NULL;
  }
  if (st == WEFT_SUCCESS) {
    d->refs++;
    *out = d;
  }
  pthread_mutex_unlock(&g_open_lock);
  return st;
}

void weft__ib_dev_release(weft__ib_dev *d) {
  if (d == NULL) return;
  pthread_mutex_lock(&g_open_lock);
  int last = --d->refs == 0;
  if (last) g_open[d->index] = NULL;
  pthread_mutex_unlock(&g_open_lock);
  if (last) close_port(d);
}

/* ---- the registration cache ---- */
weft_status_t weft__ib_mr_get(weft__ib_dev *d, const void *data, size_t size, weft__ib_mr **out) {
  *out = NULL;
  if (size == 0) return WEFT_SUCCESS;
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t start = (uintptr_t)data & ~(page - 1), end = ((uintptr_t)data + size + page - 1) & ~(page - 1);
  pthread_mutex_lock(&d->lock);
  for (weft__ib_mr *m = d->mrs; m != NULL; m = m->next)
    if (m->start <= start && end <= m->end) {
      m->refs++;
      *out = m;
      pthread_mutex_unlock(&d->lock);
      return WEFT_SUCCESS;
    }
  weft__ib_mr *m = calloc(1, sizeof(*m));
  weft_status_t st = WEFT_SUCCESS;
  if (m == NULL) {
    st = weft__error(NULL, WEFT_ERR_NO_MEMORY, "ib: registration cache: out of memory");
  } else {
    m->mr = d->ibv->reg_mr(d->pd, (void *)start, end - start,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (m->mr == NULL) {
      st = weft__error(NULL, WEFT_ERR_SYSTEM, "ib: %s: ibv_reg_mr of %zu bytes at %p: %s", d->info->name,
                       (size_t)(end - start), (void *)start, strerror(errno));
      free(m);
    } else {
      m->start = start;
      m->end = end;
      m->refs = 1;
      m->next = d->mrs;
      d->mrs = m;
      *out = m;
    }
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}

void weft__ib_mr_release(weft__ib_dev *d, weft__ib_mr *mr) {
  if (mr == NULL) return;
  pthread_mutex_lock(&d->lock);
  int last = --mr->refs == 0;
  if (last)
    for (weft__ib_mr **pp = &d->mrs; *pp != NULL; pp = &(*pp)->next)
      if (*pp == mr) {
        *pp = mr->next;
        break;
      }
  pthread_mutex_unlock(&d->lock);
  if (last) {
    d->ibv->dereg_mr(mr->mr);
    free(mr);
  }
}

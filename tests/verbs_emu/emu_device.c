/* emu_device.c: what the emulated devices offer and what a context owns: the device list,
 * open/close (the context's shared file DIR/ctx-SLOT), query device/port/GID, protection
 * domains, robust process-shared locks and asynchronous events. Configuration: emu_config.c. */
/* Paths are bounded by IBV_SYSFS_PATH_MAX; a longer WEFT_VERBS_EMU_DIR is cut, knowingly. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>
#include "emu.h"
#undef ibv_query_port

/* ---- exported: device list ---- */
struct ibv_device **ibv_get_device_list(int *num) {
  int n;
  const emu_device_cfg *cfg = emu_devices(&n);
  emu_mkdirs(emu_dir());
  struct ibv_device **list = calloc((size_t)n + 1, sizeof(*list));
  if (list == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  for (int i = 0; i < n; i++) {
    struct ibv_device *d = calloc(1, sizeof(*d));
    if (d == NULL) break;
    d->node_type = IBV_NODE_CA;
    d->transport_type = IBV_TRANSPORT_IB;
    snprintf(d->name, sizeof(d->name), "%s", cfg[i].name);
    snprintf(d->dev_name, sizeof(d->dev_name), "uverbs%d", i);
    snprintf(d->dev_path, sizeof(d->dev_path), "%s/uverbs%d", emu_dir(), i);
    emu_make_sysfs(&cfg[i], d->ibdev_path, sizeof(d->ibdev_path));
    list[i] = d;
  }
  if (num != NULL) *num = n;
  return list;
}

void ibv_free_device_list(struct ibv_device **list) {
  for (int i = 0; list != NULL && list[i] != NULL; i++) free(list[i]);
  free(list);
}

const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }

__be64 ibv_get_device_guid(struct ibv_device *d) {
  int n;
  const emu_device_cfg *cfg = emu_devices(&n);
  for (int i = 0; i < n; i++)
    if (strcmp(cfg[i].name, d->name) == 0) return htobe64(cfg[i].guid);
  return 0;
}

int ibv_fork_init(void) { return 0; }

/* ---- robust process-shared locks ---- */
void emu_init_shared_mutex(pthread_mutex_t *m) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(m, &a);
  pthread_mutexattr_destroy(&a);
}

void emu_lock(pthread_mutex_t *m) {
  if (pthread_mutex_lock(m) == EOWNERDEAD) pthread_mutex_consistent(m);
}

/* ---- open / close ---- */
/* Claims DIR/ctx-SLOT (O_EXCL; a file of a dead owner is taken over). -1 when none free. */
static int claim_slot(emu_context *c) {
  uint32_t start = (uint32_t)getpid() % EMU_MAX_SLOTS;
  for (uint32_t k = 0; k < EMU_MAX_SLOTS; k++) {
    uint32_t slot = 1 + (start + k) % EMU_MAX_SLOTS; /* QP numbers 0 and 1 are special */
    if (slot >= EMU_MAX_SLOTS) continue;
    snprintf(c->path, sizeof(c->path), "%s/ctx-%u", emu_dir(), slot);
    int fd = open(c->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      c->fd = fd;
      c->slot = slot;
      return 0;
    }
    if (errno != EEXIST) return -1;
    int old = open(c->path, O_RDONLY | O_CLOEXEC);
    int32_t pid = 0;
    if (old >= 0 && pread(old, &pid, sizeof(pid), offsetof(emu_shared, pid)) == sizeof(pid) &&
        pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
      unlink(c->path); /* its owner died without closing: free the slot, retry it */
    if (old >= 0) close(old);
    if (access(c->path, F_OK) != 0) k--;
  }
  errno = EBUSY;
  return -1;
}

struct ibv_context *ibv_open_device(struct ibv_device *device) {
  int n;
  const emu_device_cfg *cfg = emu_devices(&n), *dev = NULL;
  for (int i = 0; i < n; i++)
    if (strcmp(cfg[i].name, device->name) == 0) dev = &cfg[i];
  emu_context *c = dev != NULL ? calloc(1, sizeof(*c)) : NULL;
  if (c == NULL) {
    errno = dev == NULL ? ENODEV : ENOMEM;
    return NULL;
  }
  c->dev = dev;
  emu_mkdirs(emu_dir());
  if (claim_slot(c) != 0 || ftruncate(c->fd, sizeof(emu_shared)) != 0 ||
      (c->sh = mmap(NULL, sizeof(emu_shared), PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0)) == MAP_FAILED ||
      pipe2(c->async_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    if (c->fd > 0) {
      unlink(c->path);
      close(c->fd);
    }
    free(c);
    errno = e;
    return NULL;
  }
  emu_shared *sh = c->sh;
  sh->slot = c->slot;
  sh->pid = (int32_t)getpid();
  sh->nonce = emu_now_ns() ^ ((uint64_t)getpid() << 32);
  sh->nports = dev->nports;
  memcpy(sh->port, dev->port, sizeof(sh->port));
  for (int i = 0; i < EMU_MAX_CQ; i++) emu_init_shared_mutex(&sh->cq[i].lock);
  for (int i = 0; i < EMU_MAX_QP; i++) emu_init_shared_mutex(&sh->qp[i].lock);
  __atomic_store_n(&sh->magic, EMU_MAGIC, __ATOMIC_RELEASE);
  pthread_mutex_init(&c->lock, NULL);
  pthread_condattr_t ca; /* the worker's timed waits use the monotonic clock */
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c->work, &ca);
  pthread_condattr_destroy(&ca);
  pthread_cond_init(&c->idle, NULL);
  /* Peers write into this process with process_vm_writev: allow it under Yama's
   * ptrace_scope=1 (same user; the kernel still checks credentials). */
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  struct ibv_context *ctx = &c->ctx;
  ctx->device = device;
  ctx->cmd_fd = -1;
  ctx->async_fd = c->async_pipe[0];
  ctx->num_comp_vectors = 1;
  ctx->abi_compat = NULL; /* not extended: verbs.h's inlines use ops and the exports */
  pthread_mutex_init(&ctx->mutex, NULL);
  ctx->ops.poll_cq = emu_poll_cq;
  ctx->ops.req_notify_cq = emu_req_notify_cq;
  ctx->ops.post_send = emu_post_send;
  ctx->ops.post_recv = emu_post_recv;
  return ctx;
}

int ibv_close_device(struct ibv_context *ctx) {
  emu_context *c = emu_ctx(ctx);
  emu_worker_stop(c);
  for (emu_peer *p = c->peers, *next; p != NULL; p = next) {
    next = p->next;
    munmap(p->sh, sizeof(emu_shared));
    free(p);
  }
  while (c->events != NULL) {
    emu_event *e = c->events;
    c->events = e->next;
    free(e);
  }
  __atomic_store_n(&c->sh->magic, 0, __ATOMIC_RELEASE);
  munmap(c->sh, sizeof(emu_shared));
  unlink(c->path);
  close(c->fd);
  close(c->async_pipe[0]);
  close(c->async_pipe[1]);
  free(c);
  return 0;
}

/* ---- queries ---- */
int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a) {
  emu_context *c = emu_ctx(ctx);
  memset(a, 0, sizeof(*a));
  snprintf(a->fw_ver, sizeof(a->fw_ver), "weft-verbs-emu 1");
  a->node_guid = htobe64(c->dev->guid);
  a->sys_image_guid = a->node_guid;
  a->max_mr_size = EMU_MAX_MSG;
  a->page_size_cap = 4096;
  a->vendor_id = 0xffff;
  a->max_qp = EMU_MAX_QP;
  a->max_qp_wr = EMU_MAX_RECV;
  a->max_sge = EMU_MAX_SGE;
  a->max_cq = EMU_MAX_CQ;
  a->max_cqe = EMU_MAX_CQE;
  a->max_mr = EMU_MAX_MR;
  a->max_pd = 1 << 16;
  a->max_qp_rd_atom = a->max_qp_init_rd_atom = 16;
  a->phys_port_cnt = (uint8_t)c->dev->nports;
  return 0;
}

int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *compat) {
  emu_context *c = emu_ctx(ctx);
  if (port < 1 || port > c->dev->nports) return EINVAL;
  struct ibv_port_attr *a = (struct ibv_port_attr *)compat; /* the compat layout is a prefix */
  const emu_port_cfg *p = &c->dev->port[port - 1];
  memset(a, 0, offsetof(struct ibv_port_attr, port_cap_flags2));
  a->state = c->fatal ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = p->ib ? IBV_MTU_4096 : IBV_MTU_1024;
  a->gid_tbl_len = p->ngids;
  a->max_msg_sz = EMU_MAX_MSG;
  a->pkey_tbl_len = 1;
  a->lid = p->ib ? p->lid : 0;
  a->sm_lid = p->ib ? 1 : 0;
  a->active_width = p->active_width;
  a->active_speed = p->active_speed;
  a->phys_state = 5; /* LinkUp */
  a->link_layer = p->ib ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
  return 0;
}

int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid) {
  emu_context *c = emu_ctx(ctx);
  if (port < 1 || port > c->dev->nports || index < 0 || index >= c->dev->port[port - 1].ngids) return EINVAL;
  *gid = c->dev->port[port - 1].gid[index];
  return 0;
}

int ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey) {
  (void)ctx;
  (void)port;
  if (index != 0) return EINVAL;
  *pkey = htobe16(0xffff);
  return 0;
}

/* ---- protection domains ---- */
static uint32_t g_pd_next = 1;

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx) {
  struct ibv_pd *pd = calloc(1, sizeof(*pd));
  if (pd == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  pd->context = ctx;
  pd->handle = __atomic_fetch_add(&g_pd_next, 1, __ATOMIC_RELAXED);
  return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd) {
  emu_context *c = emu_ctx(pd->context);
  for (int i = 0; i < EMU_MAX_MR; i++)
    if (c->sh->mr[i].valid && c->sh->mr[i].pd == pd->handle) return EBUSY;
  free(pd);
  return 0;
}

/* ---- asynchronous events: a queue and a pipe whose read end is async_fd ---- */
void emu_raise_event(emu_context *c, enum ibv_event_type type, struct ibv_qp *qp, int port) {
  emu_event *e = calloc(1, sizeof(*e));
  if (e == NULL) return;
  e->ev.event_type = type;
  if (qp != NULL) e->ev.element.qp = qp;
  else e->ev.element.port_num = port;
  pthread_mutex_lock(&c->lock);
  if (c->events_tail != NULL) c->events_tail->next = e;
  else c->events = e;
  c->events_tail = e;
  pthread_mutex_unlock(&c->lock);
  char b = 1;
  if (write(c->async_pipe[1], &b, 1) != 1) perror("weft verbs emulator: async event");
}

int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *event) {
  emu_context *c = emu_ctx(ctx);
  char b;
  if (read(c->async_pipe[0], &b, 1) != 1) return -1; /* blocks, as the real call does */
  pthread_mutex_lock(&c->lock);
  emu_event *e = c->events;
  if (e != NULL) {
    c->events = e->next;
    if (c->events == NULL) c->events_tail = NULL;
  }
  pthread_mutex_unlock(&c->lock);
  if (e == NULL) return -1;
  *event = e->ev;
  free(e);
  return 0;
}

void ibv_ack_async_event(struct ibv_async_event *event) { (void)event; }

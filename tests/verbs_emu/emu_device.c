/* emu_device.c: the emulated devices and what a context owns: device list, open/close,
 * query device/port/GID, protection domains, asynchronous events.
 *
 * WEFT_VERBS_EMU_DEVICES lists the devices, ';' between devices, ',' between a device's
 * name and its keys (default "weftemu0": one IB port at 100 Gb/s):
 *   ports=N (1-2)  link=ib|roce  speed=10|25|40|50|56|100|200|400 (Gb/s)  numa=N
 *   pci=DDDD:BB:DD.F  lid=N (IB)  gid=A.B.C.D (RoCE: GID index 1 = ::ffff:A.B.C.D)
 * e.g. "mlx5_0,link=roce,numa=0,pci=0000:81:00.0;mlx5_1,numa=1,pci=0000:c1:00.0".
 * A device's LID, GUID and default RoCE address derive from the emulated host (the boot id
 * and network namespace, or WEFT_HOSTID), so the network-namespace hosts of the multi-host
 * tests see distinct ports. A malformed list is reported on stderr and gives no device. */
/* Paths are bounded by IBV_SYSFS_PATH_MAX; a longer WEFT_VERBS_EMU_DIR is cut, knowingly. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "emu.h"
#undef ibv_query_port

static emu_device_cfg g_dev[EMU_MAX_DEVICES];
static int g_ndev = -1;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

uint64_t emu_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char *emu_dir(void) {
  const char *d = getenv("WEFT_VERBS_EMU_DIR");
  return d != NULL && d[0] != '\0' ? d : "/dev/shm/weft-verbs-emu";
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t len) {
  const unsigned char *p = data;
  for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* The emulated host: as weft's own host identity (lib/host.c), boot id and netns. */
static uint64_t host_hash(void) {
  uint64_t h = 14695981039346656037ull;
  const char *id = getenv("WEFT_HOSTID");
  if (id != NULL && id[0] != '\0') return fnv1a(h, id, strlen(id));
  char boot[64] = "";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f != NULL) {
    if (fgets(boot, sizeof(boot), f) == NULL) boot[0] = '\0';
    fclose(f);
  }
  h = fnv1a(h, boot, strlen(boot));
  struct stat st;
  if (stat("/proc/self/ns/net", &st) == 0) h = fnv1a(h, &st.st_ino, sizeof(st.st_ino));
  return h;
}

/* Gb/s to the port attribute encodings (IB spec: speed per lane, lanes). */
static int set_speed(emu_port_cfg *p, int gbps) {
  static const struct { int gbps; uint8_t speed, width; } t[] = {
      {10, 4, 1}, {25, 32, 1}, {40, 4, 2}, {50, 64, 1}, {56, 16, 2},
      {100, 32, 2}, {200, 64, 2}, {400, 128, 2}};
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
    if (t[i].gbps == gbps) {
      p->active_speed = t[i].speed;
      p->active_width = t[i].width;
      p->speed_gbps = gbps;
      return 0;
    }
  return -1;
}

static void default_ports(emu_device_cfg *d, int idx, uint64_t host) {
  d->guid = host ^ ((uint64_t)idx << 56);
  for (int p = 0; p < EMU_MAX_PORTS; p++) {
    emu_port_cfg *pc = &d->port[p];
    pc->ib = 1;
    pc->lid = (uint16_t)(1 + (host + (uint64_t)idx * EMU_MAX_PORTS + (uint64_t)p) % 0xbffe);
    set_speed(pc, 100);
    memset(&pc->gid[0], 0, sizeof(pc->gid[0]));
    pc->gid[0].raw[0] = 0xfe;
    pc->gid[0].raw[1] = 0x80;
    uint64_t g = d->guid + (uint64_t)p;
    for (int b = 0; b < 8; b++) pc->gid[0].raw[8 + b] = (uint8_t)(g >> (56 - 8 * b));
    memset(&pc->gid[1], 0, sizeof(pc->gid[1]));
    pc->gid[1].raw[10] = pc->gid[1].raw[11] = 0xff;
    pc->gid[1].raw[12] = 10;
    pc->gid[1].raw[13] = (uint8_t)(host >> 8);
    pc->gid[1].raw[14] = (uint8_t)(host >> 16);
    pc->gid[1].raw[15] = (uint8_t)(1 + idx * EMU_MAX_PORTS + p);
    pc->ngids = 1;
  }
}

/* A key of every port (link, speed, lid, gid); port p gets lid + p and address + p.
 * 1 when key is one of them, 0 when it is not, -1 when its value is malformed. */
static int parse_port_key(emu_device_cfg *d, const char *key, const char *v) {
  char *end;
  long n = strtol(v, &end, 0);
  int num_ok = end != v && *end == '\0';
  unsigned a, b, c, e;
  int is_link = strcmp(key, "link") == 0, is_speed = strcmp(key, "speed") == 0;
  int is_lid = strcmp(key, "lid") == 0, is_gid = strcmp(key, "gid") == 0;
  if (!is_link && !is_speed && !is_lid && !is_gid) return 0;
  if (is_link && strcmp(v, "ib") != 0 && strcmp(v, "roce") != 0) return -1;
  if ((is_speed || is_lid) && !num_ok) return -1;
  if (is_lid && (n < 1 || n > 0xbfff - EMU_MAX_PORTS)) return -1;
  if (is_gid && (sscanf(v, "%u.%u.%u.%u", &a, &b, &c, &e) != 4 || a > 255 || b > 255 || c > 255 ||
                 e + EMU_MAX_PORTS > 256))
    return -1;
  for (int p = 0; p < EMU_MAX_PORTS; p++) {
    emu_port_cfg *pc = &d->port[p];
    if (is_link) pc->ib = strcmp(v, "ib") == 0, pc->ngids = pc->ib ? 1 : 2;
    if (is_speed && set_speed(pc, (int)n) != 0) return -1;
    if (is_lid) pc->lid = (uint16_t)(n + p);
    if (is_gid) {
      uint8_t ip[4] = {(uint8_t)a, (uint8_t)b, (uint8_t)c, (uint8_t)(e + (unsigned)p)};
      memcpy(&pc->gid[1].raw[12], ip, 4);
    }
  }
  return 1;
}

/* One "key=value" of a device; 0, or -1 when malformed or unknown. */
static int parse_key(emu_device_cfg *d, const char *kv) {
  const char *eq = strchr(kv, '=');
  char key[16];
  if (eq == NULL || (size_t)(eq - kv) >= sizeof(key)) return -1;
  memcpy(key, kv, (size_t)(eq - kv));
  key[eq - kv] = '\0';
  const char *v = eq + 1;
  int port_key = parse_port_key(d, key, v);
  if (port_key != 0) return port_key > 0 ? 0 : -1;
  char *end;
  long n = strtol(v, &end, 0);
  int num_ok = end != v && *end == '\0';
  unsigned a, b, c, e;
  if (strcmp(key, "ports") == 0 && num_ok && n >= 1 && n <= EMU_MAX_PORTS) d->nports = (int)n;
  else if (strcmp(key, "numa") == 0 && num_ok && n >= -1 && n <= 1023) d->numa = (int)n;
  else if (strcmp(key, "pci") == 0 && sscanf(v, "%x:%x:%x.%x", &a, &b, &c, &e) == 4 && strlen(v) < sizeof(d->pci))
    snprintf(d->pci, sizeof(d->pci), "%s", v);
  else return -1;
  return 0;
}

static int parse_device(char *spec, int idx, uint64_t host) {
  emu_device_cfg *d = &g_dev[idx];
  memset(d, 0, sizeof(*d));
  d->nports = 1;
  d->numa = -1;
  default_ports(d, idx, host);
  char *save = NULL;
  char *name = strtok_r(spec, ",", &save);
  if (name == NULL || name[0] == '\0' || strlen(name) >= sizeof(d->name)) return -1;
  snprintf(d->name, sizeof(d->name), "%s", name);
  for (char *kv; (kv = strtok_r(NULL, ",", &save)) != NULL;)
    if (parse_key(d, kv) != 0) {
      fprintf(stderr, "weft verbs emulator: WEFT_VERBS_EMU_DEVICES: device %s: bad key '%s'\n", d->name, kv);
      return -1;
    }
  return 0;
}

static void parse_devices(void) {
  const char *env = getenv("WEFT_VERBS_EMU_DEVICES");
  char *list = strdup(env != NULL && env[0] != '\0' ? env : "weftemu0");
  uint64_t host = host_hash();
  g_ndev = 0;
  char *save = NULL;
  for (char *spec = strtok_r(list, ";", &save); spec != NULL && list != NULL;
       spec = strtok_r(NULL, ";", &save)) {
    if (g_ndev == EMU_MAX_DEVICES || parse_device(spec, g_ndev, host) != 0) {
      fprintf(stderr, "weft verbs emulator: WEFT_VERBS_EMU_DEVICES='%s' is malformed; no device\n", env);
      g_ndev = 0;
      break;
    }
    g_ndev++;
  }
  free(list);
}

const emu_device_cfg *emu_devices(int *n) {
  pthread_once(&g_once, parse_devices);
  *n = g_ndev;
  return g_dev;
}

/* ---- a sysfs-like tree: DIR/sys-HOST/class/infiniband/NAME/device -> the PCI function ---- */
static void mkdirs(const char *path) {
  char buf[512];
  snprintf(buf, sizeof(buf), "%s", path);
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(buf, 0777);
      *p = '/';
    }
  mkdir(buf, 0777);
}

static void write_file(const char *path, const char *text) {
  char tmp[600];
  snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (f == NULL) return;
  fputs(text, f);
  fclose(f);
  rename(tmp, path); /* atomic: concurrent openers see the old or the new file */
}

static void make_sysfs(const emu_device_cfg *d, char *ibdev_path, size_t len) {
  char root[200], pcidir[400], link[450], numa[16];
  snprintf(root, sizeof(root), "%s/sys-%016llx", emu_dir(), (unsigned long long)host_hash());
  snprintf(ibdev_path, len, "%s/class/infiniband/%s", root, d->name);
  mkdirs(ibdev_path);
  if (d->pci[0] == '\0') return;
  snprintf(pcidir, sizeof(pcidir), "%s/devices/pci%.7s/%s", root, d->pci, d->pci);
  mkdirs(pcidir);
  snprintf(link, sizeof(link), "%s/numa_node", pcidir);
  snprintf(numa, sizeof(numa), "%d\n", d->numa);
  write_file(link, numa);
  snprintf(link, sizeof(link), "%s/device", ibdev_path);
  unlink(link);
  if (symlink(pcidir, link) != 0 && errno != EEXIST) perror("weft verbs emulator: symlink");
}

/* ---- exported: device list ---- */
struct ibv_device **ibv_get_device_list(int *num) {
  int n;
  const emu_device_cfg *cfg = emu_devices(&n);
  mkdirs(emu_dir());
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
    make_sysfs(&cfg[i], d->ibdev_path, sizeof(d->ibdev_path));
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
  mkdirs(emu_dir());
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

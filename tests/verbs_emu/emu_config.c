/* emu_config.c: the emulated devices' configuration, the emulated host's identity, and the
 * sysfs-like tree that gives each device a PCI path and NUMA node.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "emu.h"

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
void emu_mkdirs(const char *path) {
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

void emu_make_sysfs(const emu_device_cfg *d, char *ibdev_path, size_t len) {
  char root[200], pcidir[400], link[450], numa[16];
  snprintf(root, sizeof(root), "%s/sys-%016llx", emu_dir(), (unsigned long long)host_hash());
  snprintf(ibdev_path, len, "%s/class/infiniband/%s", root, d->name);
  emu_mkdirs(ibdev_path);
  if (d->pci[0] == '\0') return;
  snprintf(pcidir, sizeof(pcidir), "%s/devices/pci%.7s/%s", root, d->pci, d->pci);
  emu_mkdirs(pcidir);
  snprintf(link, sizeof(link), "%s/numa_node", pcidir);
  snprintf(numa, sizeof(numa), "%d\n", d->numa);
  write_file(link, numa);
  snprintf(link, sizeof(link), "%s/device", ibdev_path);
  unlink(link);
  if (symlink(pcidir, link) != 0 && errno != EEXIST) perror("weft verbs emulator: symlink");
}

/* discover_sysfs.c: the host's shape and this rank's placement from Linux's /sys, for
 * builds without hwloc (or WEFT_TOPO_HWLOC=0, or when hwloc fails to load).
 *
 * Reads /sys/devices/system/cpu/online, each online CPU's topology/physical_package_id and
 * core_id (packages, cores), cache/indexK of level 3 (L3 caches: one per distinct
 * shared_cpu_list, numbered by their lowest CPU as hwloc numbers them),
 * /sys/devices/system/node/nodeN/cpulist (NUMA nodes), the /sys/class/net entries with a PCI
 * device (NICs) and the /sys/bus/pci/devices of GPU class (the same rule as
 * discover_hwloc.c).
 * Each NIC and GPU also gets its PCI path and local CPUs (weft__topo_add_device). Less than
 * hwloc sees (no CUDA names) but enough for the rank map and the device matrix. */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "topo/topo.h"

#define MAX_GROUPS 256 /* packages, cores or L3 caches told apart on one host */

/* The first line of a file into buf; 0 on success. */
static int read_line(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  char *got = fgets(buf, (int)len, f);
  fclose(f);
  if (got == NULL) return -1;
  buf[strcspn(buf, "\n")] = '\0';
  return 0;
}

static long read_long(const char *path, long def) {
  char buf[64];
  if (read_line(path, buf, sizeof(buf)) != 0) return def;
  char *end;
  long v = strtol(buf, &end, 0);
  return end == buf ? def : v;
}

static int has_cpu(const uint8_t *set, int c) { return (set[c / 8] >> (c % 8)) & 1; }

/* 1 when every CPU of a is in b (and a is not empty). */
static int included(const uint8_t *a, const uint8_t *b) {
  int any = 0;
  for (int i = 0; i < WEFT__TOPO_MAX_CPUS / 8; i++) {
    if (a[i] & ~b[i]) return 0;
    any |= a[i];
  }
  return any != 0;
}

/* Adds key to the distinct keys[0..*n) (a tiny set); returns its index. */
static int add_key(long *keys, int *n, long key) {
  for (int i = 0; i < *n; i++)
    if (keys[i] == key) return i;
  if (*n < MAX_GROUPS) keys[(*n)++] = key;
  return *n - 1;
}

static void count_cpus(weft__topo_summary *out, const uint8_t *online) {
  long pkgs[MAX_GROUPS], cores[MAX_GROUPS], l3s[MAX_GROUPS];
  int npkg = 0, ncore = 0, nl3 = 0;
  char path[160], list[512];
  for (int c = 0; c < WEFT__TOPO_MAX_CPUS; c++) {
    if (!has_cpu(online, c)) continue;
    out->host.pus++;
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", c);
    long pkg = read_long(path, 0);
    add_key(pkgs, &npkg, pkg);
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/core_id", c);
    add_key(cores, &ncore, pkg * 1000000 + read_long(path, c));
    for (int idx = 0; idx < 8; idx++) {
      snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/cache/index%d/level", c, idx);
      if (read_long(path, -1) != 3) continue;
      snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/cache/index%d/shared_cpu_list", c, idx);
      uint8_t shared[WEFT__TOPO_MAX_CPUS / 8];
      if (read_line(path, list, sizeof(list)) != 0 || weft__topo_cpuset_parse(list, shared) != 0) break;
      int first = 0;
      while (first < WEFT__TOPO_MAX_CPUS && !has_cpu(shared, first)) first++;
      int k = add_key(l3s, &nl3, first); /* CPUs are visited in order: index = hwloc's */
      if (out->self.core_group < 0 && included(out->self.cpuset, shared)) out->self.core_group = k;
      break;
    }
  }
  out->host.packages = npkg;
  out->host.cores = ncore;
  out->host.l3_caches = nl3;
}

static void count_numa(weft__topo_summary *out) {
  DIR *d = opendir("/sys/devices/system/node");
  if (d == NULL) { /* kernels without NUMA support: one node holding everything */
    out->host.numa_nodes = 1;
    out->self.numa = 0;
    return;
  }
  struct dirent *e;
  char path[300], list[512];
  while ((e = readdir(d)) != NULL) {
    int id;
    if (sscanf(e->d_name, "node%d", &id) != 1) continue;
    out->host.numa_nodes++;
    uint8_t cpus[WEFT__TOPO_MAX_CPUS / 8];
    snprintf(path, sizeof(path), "/sys/devices/system/node/%s/cpulist", e->d_name);
    if (read_line(path, list, sizeof(list)) == 0 && weft__topo_cpuset_parse(list, cpus) == 0 &&
        included(out->self.cpuset, cpus))
      out->self.numa = id;
  }
  closedir(d);
}

/* The PCI address in a resolved sysfs device path: its last component of the form
 * dddd:bb:dd.f ("" when none); the NUMA node from that directory's numa_node. */
static void pci_of_path(const char *real, char *pci, size_t len, int32_t *numa) {
  pci[0] = '\0';
  *numa = -1;
  char buf[PATH_MAX];
  snprintf(buf, sizeof(buf), "%s", real);
  for (char *slash; (slash = strrchr(buf, '/')) != NULL; *slash = '\0') {
    unsigned dom, bus, dev, fn;
    char tail;
    if (sscanf(slash + 1, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4) continue;
    snprintf(pci, len, "%s", slash + 1);
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/numa_node", buf);
    *numa = (int32_t)read_long(path, -1);
    return;
  }
}

static void list_nics(weft__topo_host *host) {
  DIR *d = opendir("/sys/class/net");
  if (d == NULL) return;
  struct dirent *e;
  char path[300], real[PATH_MAX], pci[16];
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof(path), "/sys/class/net/%s/device", e->d_name);
    if (realpath(path, real) == NULL) continue; /* virtual: lo, veth, bridges */
    int32_t numa;
    pci_of_path(real, pci, sizeof(pci), &numa);
    weft__topo_add_device(host, "nic", e->d_name, pci, numa);
  }
  closedir(d);
}

static void list_gpus(weft__topo_host *host) {
  DIR *d = opendir("/sys/bus/pci/devices");
  if (d == NULL) return;
  struct dirent *e;
  char path[300];
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/class", e->d_name);
    long cls = read_long(path, 0) >> 8;
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/vendor", e->d_name);
    long vendor = read_long(path, 0);
    if (!(cls == 0x0302 || (cls == 0x0300 && (vendor == 0x10de || vendor == 0x1002)))) continue;
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", e->d_name);
    weft__topo_add_device(host, "gpu", "", e->d_name, (int32_t)read_long(path, -1));
  }
  closedir(d);
}

int weft__topo_discover_sysfs(weft__topo_summary *out) {
  snprintf(out->host.discovery, sizeof(out->host.discovery), "sysfs");
  uint8_t online[WEFT__TOPO_MAX_CPUS / 8];
  char list[512];
  if (read_line("/sys/devices/system/cpu/online", list, sizeof(list)) != 0 ||
      weft__topo_cpuset_parse(list, online) != 0)
    memcpy(online, out->self.cpuset, sizeof(online));
  count_cpus(out, online);
  count_numa(out);
  list_nics(&out->host);
  list_gpus(&out->host);
  /* The kernel says -1 for devices of a host with one NUMA node; hwloc places them on it. */
  for (int i = 0; i < out->host.ndevices && out->host.numa_nodes == 1; i++)
    if (out->host.devices[i].numa < 0) out->host.devices[i].numa = 0;
  return 0;
}

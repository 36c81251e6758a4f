/* discover.c: one rank's view of where it runs, the part common to both back ends.
 *
 * Steps: the host identity (weft__host_hash, the same one the communicator uses to pick
 * shared memory), the CPUs this process may run on (sched_getaffinity: what the launcher
 * or taskset bound it to), the NIC it would use (weft__sockaddr_pick_local, i.e.
 * WEFT_SOCKET_IFNAME or the first non-loopback interface that is up) with its speed from
 * /sys/class/net/IF/speed; then the host's shape (packages, NUMA nodes, cores, L3 caches,
 * NICs, GPUs) and this rank's NUMA node and core group from hwloc (discover_hwloc.c) or,
 * without it, from /sys (discover_sysfs.c). WEFT_TOPO_HWLOC=0 forces the sysfs path.
 * Every NIC and GPU gets its PCI path and local CPUs from /sys/bus/pci/devices (both back
 * ends), and the full discovery asks NVML for NVLinks between GPUs (nvlink.c).
 * Communicator init uses the quick variant: /sys unless WEFT_TOPO_HWLOC=1, no NVML. */
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "lib/comm.h"
#include "lib/cpu_key.h"
#include "lib/env.h"
#include "lib/sockutil.h"
#include "lib/status.h"
#include "topo/topo.h"

/* The CPUs of this process; all CPUs the kernel reports when the call fails. */
static void read_affinity(uint8_t *set) {
  cpu_set_t cs;
  CPU_ZERO(&cs);
  memset(set, 0, WEFT__TOPO_MAX_CPUS / 8);
  if (sched_getaffinity(0, sizeof(cs), &cs) != 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < n && c < WEFT__TOPO_MAX_CPUS; c++) set[c / 8] |= 1u << (c % 8);
    return;
  }
  for (int c = 0; c < CPU_SETSIZE && c < WEFT__TOPO_MAX_CPUS; c++)
    if (CPU_ISSET(c, &cs)) set[c / 8] |= 1u << (c % 8);
}

/* /sys/class/net/IF/speed in Mb/s; -1 when unreadable or negative (virtual NICs say -1
 * or fail with EINVAL). */
int32_t weft__topo_nic_speed(const char *ifname) {
  char path[128];
  snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  long v = -1;
  if (fscanf(f, "%ld", &v) != 1 || v <= 0) v = -1;
  fclose(f);
  return (int32_t)v;
}

void weft__topo_pci_sysfs(const char *pci, char *path, size_t len, uint8_t *cpus) {
  char sys[96], real[PATH_MAX], list[512];
  path[0] = '\0';
  memset(cpus, 0, WEFT__TOPO_MAX_CPUS / 8);
  if (pci[0] == '\0') return;
  snprintf(sys, sizeof(sys), "/sys/bus/pci/devices/%s", pci);
  if (realpath(sys, real) != NULL && strlen(real) < len) memcpy(path, real, strlen(real) + 1);
  snprintf(sys, sizeof(sys), "/sys/bus/pci/devices/%s/local_cpulist", pci);
  FILE *f = fopen(sys, "r");
  if (f == NULL) return;
  if (fgets(list, sizeof(list), f) == NULL || weft__topo_cpuset_parse(list, cpus) != 0)
    memset(cpus, 0, WEFT__TOPO_MAX_CPUS / 8);
  fclose(f);
}

void weft__topo_add_device(weft__topo_host *host, const char *kind, const char *name,
                           const char *pci, int32_t numa) {
  for (int i = 0; i < host->ndevices; i++) {
    weft__topo_device *d = &host->devices[i];
    if (pci[0] != '\0' && strcmp(d->kind, kind) == 0 && strcmp(d->pci, pci) == 0) {
      if (d->name[0] == '\0') snprintf(d->name, sizeof(d->name), "%s", name);
      return;
    }
  }
  if (host->ndevices >= WEFT__TOPO_MAX_DEVICES) return;
  weft__topo_device *d = &host->devices[host->ndevices++];
  snprintf(d->kind, sizeof(d->kind), "%s", kind);
  snprintf(d->name, sizeof(d->name), "%s", name);
  snprintf(d->pci, sizeof(d->pci), "%s", pci);
  d->numa = numa;
  d->speed_mbps = strcmp(kind, "nic") == 0 && name[0] ? weft__topo_nic_speed(name) : -1;
  if (strcmp(kind, "nic") == 0 || strcmp(kind, "gpu") == 0) /* HCAs: ib_topo.c, from ibdev_path */
    weft__topo_pci_sysfs(pci, d->path, sizeof(d->path), d->cpus);
}

/* The interface weft's socket transport would choose, or "" when none is usable. */
static void pick_nic(weft__topo_rank *self) {
  weft__sockaddr addr;
  self->nic[0] = '\0';
  weft__error_quiet(1);
  weft_status_t st = weft__sockaddr_pick_local(&addr, self->nic, sizeof(self->nic));
  weft__error_quiet(0);
  if (st != WEFT_SUCCESS) self->nic[0] = '\0';
  self->nic_speed_mbps = self->nic[0] ? weft__topo_nic_speed(self->nic) : -1;
}

/* The NIC's NUMA node, from the host's device list filled by the back end. */
static void nic_locality(const weft__topo_host *host, weft__topo_rank *self) {
  self->nic_numa = -1;
  for (int i = 0; i < host->ndevices; i++)
    if (strcmp(host->devices[i].name, self->nic) == 0) self->nic_numa = host->devices[i].numa;
}

static void discover(weft__topo_summary *out, int use_hwloc) {
  memset(out, 0, sizeof(*out));
  out->magic = WEFT__TOPO_MAGIC;
  out->host.hash = weft__host_hash(out->host.hostname, sizeof(out->host.hostname));
  snprintf(out->host.cpu, sizeof(out->host.cpu), "%s", weft__cpu_key());
  out->self.pid = (int32_t)getpid();
  out->self.numa = -1;
  out->self.core_group = -1;
  read_affinity(out->self.cpuset);
  pick_nic(&out->self);
  int done = -1;
#ifdef WEFT_HAVE_HWLOC
  if (use_hwloc) done = weft__topo_discover_hwloc(out);
#endif
  if (done != 0) weft__topo_discover_sysfs(out);
  weft__topo_discover_ib(&out->host);
#ifndef WEFT_HAVE_HWLOC
  snprintf(out->host.discovery, sizeof(out->host.discovery), "sysfs/no-hwloc");
#else
  (void)use_hwloc;
#endif
  nic_locality(&out->host, &out->self);
}

void weft__topo_discover(weft__topo_summary *out) {
  discover(out, weft__env_long("WEFT_TOPO_HWLOC", 1) != 0);
  weft__topo_discover_nvlink(&out->host);
}

/* At init: /sys unless asked for hwloc (see topo.h for the cost). */
void weft__topo_discover_quick(weft__topo_summary *out) {
  discover(out, weft__env_long("WEFT_TOPO_HWLOC", 0) == 1);
}

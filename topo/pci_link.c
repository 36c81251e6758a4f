/* pci_link.c: how two devices of one host are connected, in nvidia-smi topo -m's words.
 *
 * Input: each device's PCI path, the sysfs directory of its PCI function, e.g.
 *   /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0
 * "pci0000:00" is the host bridge (the root complex of PCI domain 0000, root bus 00); the
 * functions after it are the bridges on the way down, the device itself last. Below a root
 * port (the first function) a PCIe switch shows as two functions, its upstream port then
 * one of its downstream ports; so, counting from the root port as 1, a switch's upstream
 * port sits at an even depth. Between two devices under the same host bridge:
 *   - different root ports (no common function): the path crosses the host bridge, PHB;
 *   - else the switches crossed are those whose upstream port lies on the tree path
 *     between them (their common ancestor included): at most one is PIX, more is PXB.
 *     nvidia-smi counts a switch as one "PCIe bridge" too: a GPU and a NIC under one switch
 *     are PIX, not three bridge functions.
 * Devices under different host bridges are NODE on one NUMA node, SYS across nodes (or
 * when a node is unknown). Without a path, only different known NUMA nodes tell (SYS); the
 * rest is "?". NV# comes from the host's NVLink table (nvlink.c), not from paths.
 * Pure functions: nothing is read from the machine. */
#include <stdio.h>
#include <string.h>
#include "topo/topo.h"

#define MAX_DEPTH 32 /* functions below a host bridge; a 128-byte path holds fewer */

typedef struct {
  char root[16];                  /* "pci0000:00", "" when the path has none */
  int depth;                      /* functions below the root, the device last */
  char fn[MAX_DEPTH][16];         /* "0000:00:01.0" ... */
} pci_chain;

static int is_bdf(const char *s, size_t n) {
  unsigned dom, bus, dev, f;
  char tmp[16], tail;
  if (n == 0 || n >= sizeof(tmp)) return 0;
  memcpy(tmp, s, n);
  tmp[n] = '\0';
  return sscanf(tmp, "%x:%x:%x.%x%c", &dom, &bus, &dev, &f, &tail) == 4;
}

static int is_root(const char *s, size_t n) {
  unsigned dom, bus;
  char tmp[16], tail;
  if (n < 4 || n >= sizeof(tmp) || strncmp(s, "pci", 3) != 0) return 0;
  memcpy(tmp, s, n);
  tmp[n] = '\0';
  return sscanf(tmp + 3, "%x:%x%c", &dom, &bus, &tail) == 2;
}

/* Splits path into its host bridge and the functions below it; 0, or -1 when it has none. */
static int parse_chain(const char *path, pci_chain *c) {
  memset(c, 0, sizeof(*c));
  for (const char *p = path; *p != '\0';) {
    while (*p == '/') p++;
    size_t n = strcspn(p, "/");
    if (is_root(p, n)) { /* a later host bridge (nested hierarchies) starts over */
      memset(c, 0, sizeof(*c));
      memcpy(c->root, p, n);
    } else if (c->root[0] != '\0' && is_bdf(p, n) && c->depth < MAX_DEPTH) {
      memcpy(c->fn[c->depth++], p, n);
    }
    p += n;
  }
  return c->root[0] != '\0' && c->depth > 0 ? 0 : -1;
}

/* Switch upstream ports (even depth, counting the root port as 1) among the functions at
 * depths from..to (1-based, inclusive). */
static int upstream_ports(int from, int to) {
  int n = 0;
  for (int d = from; d <= to; d++) n += d >= 2 && d % 2 == 0;
  return n;
}

static int numa_differ(int32_t a, int32_t b) { return a >= 0 && b >= 0 && a != b; }

weft__pci_link weft__topo_pci_link(const char *path_a, int32_t numa_a, const char *path_b, int32_t numa_b) {
  pci_chain a, b;
  if (parse_chain(path_a, &a) != 0 || parse_chain(path_b, &b) != 0)
    return numa_differ(numa_a, numa_b) ? WEFT__PCI_SYS : WEFT__PCI_UNKNOWN;
  if (strcmp(a.root, b.root) != 0) /* an unknown node may be the other one: SYS */
    return numa_a >= 0 && numa_a == numa_b ? WEFT__PCI_NODE : WEFT__PCI_SYS;
  int k = 0; /* functions in common */
  while (k < a.depth && k < b.depth && strcmp(a.fn[k], b.fn[k]) == 0) k++;
  if (k == a.depth && k == b.depth) return WEFT__PCI_SELF;
  if (k == 0) return WEFT__PCI_PHB;
  /* On the tree path: a's functions k+1..depth-1, b's likewise, and the common one at k;
   * one that is an ancestor of the other contributes none of its own. */
  int sw = upstream_ports(k, k) + upstream_ports(k + 1, a.depth - 1) + upstream_ports(k + 1, b.depth - 1);
  return sw <= 1 ? WEFT__PCI_PIX : WEFT__PCI_PXB;
}

weft__pci_link weft__topo_device_link(const weft__topo_host *host, int i, int j, int *nvlinks) {
  const weft__topo_device *a = &host->devices[i], *b = &host->devices[j];
  *nvlinks = 0;
  if (i == j) return WEFT__PCI_SELF;
  if (host->nvlink_known && host->nvlinks[i][j] > 0) {
    *nvlinks = host->nvlinks[i][j];
    return WEFT__PCI_NVLINK;
  }
  return weft__topo_pci_link(a->path, a->numa, b->path, b->numa);
}

const char *weft__topo_pci_link_name(weft__pci_link l) {
  static const char *names[WEFT__NUM_PCI_LINKS] = {"X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS", "?"};
  return (unsigned)l < WEFT__NUM_PCI_LINKS ? names[l] : "?";
}

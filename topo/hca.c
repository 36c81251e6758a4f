/* hca.c: the HCAs of a host (from the ib transport's discovery) and which one a rank uses.
 *
 * Discovery goes through transports/ib/ib_dev.h, the same list the ib transport will use,
 * so weft-topo shows exactly the ports the transport may take (WEFT_IB_HCA applied), with
 * the PCI address, PCI path and NUMA node read from ibdev_path/device as NCCL reads them.
 * Ranks use the nearest HCA: one on their NUMA node, spread over the node's HCAs by their
 * order among the node's ranks (NCCL picks the closest NIC and spreads local ranks). */
#include <stdio.h>
#include <string.h>
#include "topo/topo.h"
#ifdef WEFT_HAVE_IBVERBS
#include "transports/ib/ib_dev.h"
#endif

static int is_hca(const weft__topo_device *d) { return strcmp(d->kind, "ib") == 0 || strcmp(d->kind, "roce") == 0; }

#ifdef WEFT_HAVE_IBVERBS
static void add_port(weft__topo_host *host, const weft__ib_port_info *p) {
  weft__topo_device *d = NULL;
  for (int i = 0; i < host->ndevices && d == NULL; i++)
    if (is_hca(&host->devices[i]) && strcmp(host->devices[i].name, p->name) == 0) d = &host->devices[i];
  if (d != NULL && d->path[0] != '\0') return; /* listed by an earlier port of this device */
  if (d == NULL) {
    int before = host->ndevices;
    weft__topo_add_device(host, p->link_ib ? "ib" : "roce", p->name, p->pci, p->numa);
    if (host->ndevices == before) return; /* the list is full */
    d = &host->devices[host->ndevices - 1];
  }
  snprintf(d->kind, sizeof(d->kind), "%s", p->link_ib ? "ib" : "roce");
  snprintf(d->pci, sizeof(d->pci), "%s", p->pci);
  size_t n = strlen(p->pci_path);
  if (n > 0 && n < sizeof(d->path)) memcpy(d->path, p->pci_path, n + 1);
  else snprintf(d->path, sizeof(d->path), "-"); /* unknown (or too long to keep) */
  d->numa = p->numa;
  d->speed_mbps = p->speed_mbps > 0 ? p->speed_mbps : -1;
}
#endif

void weft__topo_discover_ib(weft__topo_host *host) {
#ifdef WEFT_HAVE_IBVERBS
  const weft__ib_port_info *ports;
  int n = weft__ib_ports(&ports, NULL);
  for (int i = 0; i < n; i++) add_port(host, &ports[i]);
  for (int i = 0; i < host->ndevices; i++) /* "-": known to have no PCI path; shown as such */
    if (is_hca(&host->devices[i]) && strcmp(host->devices[i].path, "-") == 0) host->devices[i].path[0] = '\0';
#else
  (void)host;
#endif
}

int weft__topo_pick_hca(const weft__topo_system *sys, int rank) {
  const weft__topo_rank *me = &sys->ranks[rank];
  const weft__topo_host *host = &sys->hosts[me->host];
  int local[WEFT__TOPO_MAX_DEVICES], nlocal = 0, all[WEFT__TOPO_MAX_DEVICES], nall = 0;
  for (int i = 0; i < host->ndevices; i++) {
    if (!is_hca(&host->devices[i])) continue;
    all[nall++] = i;
    if (me->numa >= 0 && host->devices[i].numa == me->numa) local[nlocal++] = i;
  }
  if (nall == 0) return -1;
  const int *set = nlocal > 0 ? local : all;
  int count = nlocal > 0 ? nlocal : nall, k = 0;
  for (int r = 0; r < rank; r++) /* earlier ranks of this host on the same node */
    k += sys->ranks[r].host == me->host && (nlocal == 0 || sys->ranks[r].numa == me->numa);
  return set[k % count];
}

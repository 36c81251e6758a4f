/* ib_topo.c: the ib transport's HCAs in the topology view (topo/topo.h's
 * weft__topo_discover_ib): each usable port's device with its kind (ib or roce), PCI address,
 * PCI path and NUMA node read from ibdev_path/device as NCCL reads them, and its speed.
 * Discovery goes through ib_dev.h, the same list the transport uses (WEFT_IB_HCA applied).
 * Built everywhere: without the verbs headers it adds nothing. */
#include <stdio.h>
#include <string.h>
#include "topo/topo.h"
#ifdef WEFT_HAVE_IBVERBS
#include "transports/ib/ib_dev.h"
#endif

#ifdef WEFT_HAVE_IBVERBS
static int is_hca(const weft__topo_device *d) { return strcmp(d->kind, "ib") == 0 || strcmp(d->kind, "roce") == 0; }

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
  char unused[sizeof(d->path)];
  weft__topo_pci_sysfs(p->pci, unused, sizeof(unused), d->cpus); /* its local CPUs */
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


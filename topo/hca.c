/* hca.c: which HCA a rank uses, from the HCAs its host's view lists (kind "ib" or "roce").
 *
 * The HCAs themselves are found by the ib transport's discovery (transports/ib/ib_topo.c,
 * weft__topo_discover_ib), the same list the transport uses, so weft-topo shows exactly the
 * ports it may take. Ranks use the nearest HCA: one on their NUMA node, spread over the
 * node's HCAs by their order among the node's ranks (NCCL picks the closest NIC and spreads
 * local ranks). */
#include <stdio.h>
#include <string.h>
#include "topo/topo.h"

static int is_hca(const weft__topo_device *d) { return strcmp(d->kind, "ib") == 0 || strcmp(d->kind, "roce") == 0; }

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

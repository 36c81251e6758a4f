/* discover_hwloc.c: the host's shape and this rank's placement from hwloc (built only
 * when configure found hwloc >= 2.0, Debian's libhwloc-dev).
 *
 * Counts packages, NUMA nodes, cores, PUs and L3 caches; the rank's NUMA node and core
 * group are the NUMA node and the L3 whose CPU sets contain all of the rank's CPUs (-1
 * when it spans several, e.g. an unbound rank on a two-socket host). Devices: network
 * and OpenFabrics OS devices (NICs), GPU and co-processor OS devices (DRM, CUDA and NVML,
 * where hwloc's plugins are installed), and PCI 3D controllers or NVIDIA/AMD display
 * controllers that have no driver; each with its PCI address and the NUMA node of its
 * closest non-I/O ancestor, and (weft__topo_add_device) the sysfs path of its PCI function
 * and its local CPUs. I/O discovery keeps only "important" devices (hwloc's
 * HWLOC_TYPE_FILTER_KEEP_IMPORTANT) so loading stays fast. */
#include <stdio.h>
#include <string.h>
#include <hwloc.h>
#include "topo/topo.h"

static hwloc_bitmap_t to_bitmap(const uint8_t *set) {
  hwloc_bitmap_t b = hwloc_bitmap_alloc();
  if (b == NULL) return NULL;
  for (int c = 0; c < WEFT__TOPO_MAX_CPUS; c++)
    if (set[c / 8] & (1u << (c % 8))) hwloc_bitmap_set(b, (unsigned)c);
  return b;
}

/* The index of the object of type whose CPU set contains all of set, or -1. */
static int32_t containing(hwloc_topology_t topo, hwloc_obj_type_t type, hwloc_const_bitmap_t set,
                          int os_numbering) {
  if (hwloc_bitmap_iszero(set)) return -1;
  int n = hwloc_get_nbobjs_by_type(topo, type);
  for (int i = 0; i < n; i++) {
    hwloc_obj_t o = hwloc_get_obj_by_type(topo, type, (unsigned)i);
    if (o != NULL && o->cpuset != NULL && hwloc_bitmap_isincluded(set, o->cpuset))
      return (int32_t)(os_numbering ? o->os_index : o->logical_index);
  }
  return -1;
}

/* The PCI address of obj or of its nearest PCI ancestor; "" when there is none. */
static void pci_address(hwloc_obj_t obj, char *buf, size_t len) {
  buf[0] = '\0';
  for (; obj != NULL; obj = obj->parent) {
    if (obj->type != HWLOC_OBJ_PCI_DEVICE) continue;
    snprintf(buf, len, "%04x:%02x:%02x.%01x", (unsigned)obj->attr->pcidev.domain,
             obj->attr->pcidev.bus, obj->attr->pcidev.dev, obj->attr->pcidev.func);
    return;
  }
}

/* The NUMA node an I/O object hangs off, -1 when unknown or several. */
static int32_t io_numa(hwloc_topology_t topo, hwloc_obj_t obj) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, obj);
  if (anc == NULL || anc->nodeset == NULL || hwloc_bitmap_weight(anc->nodeset) != 1) return -1;
  return (int32_t)hwloc_bitmap_first(anc->nodeset);
}

static void list_os_devices(hwloc_topology_t topo, weft__topo_host *host) {
  for (hwloc_obj_t o = hwloc_get_next_osdev(topo, NULL); o != NULL;
       o = hwloc_get_next_osdev(topo, o)) {
    const char *kind = NULL;
    switch (o->attr->osdev.type) {
      case HWLOC_OBJ_OSDEV_NETWORK: kind = "nic"; break;
      case HWLOC_OBJ_OSDEV_OPENFABRICS: kind = "ib"; break;
      case HWLOC_OBJ_OSDEV_GPU: /* fall through: DRM, NVML */
      case HWLOC_OBJ_OSDEV_COPROC: kind = "gpu"; break; /* CUDA, OpenCL */
      default: break;
    }
    if (kind == NULL || o->name == NULL) continue;
    char pci[16];
    pci_address(o, pci, sizeof(pci));
    weft__topo_add_device(host, kind, o->name, pci, io_numa(topo, o));
  }
}

/* GPUs that no driver exposes as an OS device still show as PCI functions. */
static void list_bare_gpus(hwloc_topology_t topo, weft__topo_host *host) {
  for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, NULL); o != NULL;
       o = hwloc_get_next_pcidev(topo, o)) {
    unsigned cls = o->attr->pcidev.class_id, vendor = o->attr->pcidev.vendor_id;
    int gpu = cls == 0x0302 || (cls == 0x0300 && (vendor == 0x10de || vendor == 0x1002));
    if (!gpu) continue;
    char pci[16];
    pci_address(o, pci, sizeof(pci));
    weft__topo_add_device(host, "gpu", "", pci, io_numa(topo, o));
  }
}

int weft__topo_discover_hwloc(weft__topo_summary *out) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return -1;
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return -1;
  }
  weft__topo_host *h = &out->host;
  snprintf(h->discovery, sizeof(h->discovery), "hwloc");
  h->packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  h->numa_nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  h->cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  h->pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  h->l3_caches = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_L3CACHE);
  hwloc_bitmap_t set = to_bitmap(out->self.cpuset);
  if (set != NULL) {
    out->self.numa = containing(topo, HWLOC_OBJ_NUMANODE, set, 1);
    out->self.core_group = containing(topo, HWLOC_OBJ_L3CACHE, set, 0);
    hwloc_bitmap_free(set);
  }
  list_os_devices(topo, h);
  list_bare_gpus(topo, h);
  hwloc_topology_destroy(topo);
  return 0;
}

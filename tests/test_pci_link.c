/* test_pci_link.c: the link classes between a host's devices (topo/pci_link.c) on synthetic
 * sysfs PCI paths, one test per entry of nvidia-smi topo -m's legend, and the NVLink count
 * (topo/nvlink.c) on a fake NVML that describes GPU boxes. Pure: no ranks, no /sys. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "topo/topo.h"

/* Two sockets. Node 0: host bridge pci0000:00 with root port 00:01.0 leading to a PCIe
 * switch (upstream 01:00.0, downstream 02:08.0 / 02:10.0), and below 02:10.0 a second
 * switch (upstream 04:00.0, downstream 05:00.0); root port 00:02.0 holds a dual-port NIC
 * (06:00.0 / 06:00.1). Node 0 also has a second host bridge pci0000:40. Node 1: pci0000:80. */
#define SW1 "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
static const char *gpu0 = SW1 "/0000:02:08.0/0000:03:00.0";                         /* under switch 1 */
static const char *nic0 = SW1 "/0000:02:10.0/0000:04:00.0/0000:05:00.0/0000:07:00.0"; /* under switch 2 */
static const char *gpu1 = SW1 "/0000:02:10.0/0000:04:00.0/0000:05:01.0/0000:08:00.0"; /* switch 2 too */
static const char *nic1 = "/sys/devices/pci0000:00/0000:00:02.0/0000:06:00.0";
static const char *nic1b = "/sys/devices/pci0000:00/0000:00:02.0/0000:06:00.1";
static const char *gpu2 = "/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0";
static const char *gpu3 = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0";

static void x_is_the_device_itself(void **state) {
  (void)state;
  assert_int_equal(weft__topo_pci_link(gpu0, 0, gpu0, 0), WEFT__PCI_SELF);
  assert_string_equal(weft__topo_pci_link_name(WEFT__PCI_SELF), "X");
}

static void pix_is_one_switch_or_one_device_between(void **state) {
  (void)state;
  assert_int_equal(weft__topo_pci_link(nic0, 0, gpu1, 0), WEFT__PCI_PIX); /* siblings under switch 2 */
  assert_int_equal(weft__topo_pci_link(gpu1, 0, nic0, 0), WEFT__PCI_PIX);
  assert_int_equal(weft__topo_pci_link(nic1, 0, nic1b, 0), WEFT__PCI_PIX); /* two functions */
  assert_string_equal(weft__topo_pci_link_name(WEFT__PCI_PIX), "PIX");
}

static void pxb_is_several_switches_below_one_root_port(void **state) {
  (void)state;
  assert_int_equal(weft__topo_pci_link(gpu0, 0, nic0, 0), WEFT__PCI_PXB); /* switch 1, then 2 */
  assert_int_equal(weft__topo_pci_link(nic0, 0, gpu0, 0), WEFT__PCI_PXB);
  assert_int_equal(weft__topo_pci_link(gpu0, 0, gpu1, 0), WEFT__PCI_PXB);
  assert_string_equal(weft__topo_pci_link_name(WEFT__PCI_PXB), "PXB");
}

static void phb_is_two_root_ports_of_one_host_bridge(void **state) {
  (void)state;
  assert_int_equal(weft__topo_pci_link(gpu0, 0, nic1, 0), WEFT__PCI_PHB);
  assert_int_equal(weft__topo_pci_link(nic1b, 0, gpu1, 0), WEFT__PCI_PHB);
  /* a VM's devices sit right on the root bus: PHB between them as well */
  assert_int_equal(weft__topo_pci_link("/sys/devices/pci0000:00/0000:00:03.0", 0,
                                       "/sys/devices/pci0000:00/0000:00:05.0", 0), WEFT__PCI_PHB);
  assert_string_equal(weft__topo_pci_link_name(WEFT__PCI_PHB), "PHB");
}

static void node_is_two_host_bridges_of_one_numa_node(void **state) {
  (void)state;
  assert_int_equal(weft__topo_pci_link(gpu0, 0, gpu2, 0), WEFT__PCI_NODE);
  assert_string_equal(weft__topo_pci_link_name(WEFT__PCI_NODE), "NODE");
}

static void sys_is_across_numa_nodes_or_an_unknown_node(void **state) {
  (void)state;
  assert_int_equal(weft__topo_pci_link(gpu0, 0, gpu3, 1), WEFT__PCI_SYS);
  assert_int_equal(weft__topo_pci_link(gpu0, 0, gpu2, -1), WEFT__PCI_SYS); /* may be node 1 */
  assert_int_equal(weft__topo_pci_link("", 0, "", 1), WEFT__PCI_SYS);     /* no path, known nodes */
  assert_string_equal(weft__topo_pci_link_name(WEFT__PCI_SYS), "SYS");
}

static void unknown_without_a_pci_path(void **state) {
  (void)state;
  assert_int_equal(weft__topo_pci_link("", 0, gpu0, 0), WEFT__PCI_UNKNOWN);
  assert_int_equal(weft__topo_pci_link("/sys/devices/platform/foo", 0, gpu0, 0), WEFT__PCI_UNKNOWN);
  assert_string_equal(weft__topo_pci_link_name(WEFT__PCI_UNKNOWN), "?");
}

/* Paths of the verbs emulator's sysfs tree (tests/verbs_emu) have a prefix before the
 * host bridge: it is ignored. */
static void a_prefix_before_the_host_bridge_is_ignored(void **state) {
  (void)state;
  assert_int_equal(weft__topo_pci_link("/dev/shm/x/sys-1/devices/pci0000:81/0000:81:00.0", 0,
                                       "/dev/shm/x/sys-1/devices/pci0000:c1/0000:c1:00.0", 1), WEFT__PCI_SYS);
  assert_int_equal(weft__topo_pci_link("/dev/shm/x/sys-1/devices/pci0000:81/0000:81:00.0", 0,
                                       "/dev/shm/x/sys-1/devices/pci0000:81/0000:81:01.0", 0), WEFT__PCI_PHB);
}

/* ---------------------------------------------------------------------------------- */
/* NVLink, from a fake NVML */

typedef struct {
  const char *pci;        /* the GPU */
  const char *remote[18]; /* far end of each active link, NULL inactive */
} fake_gpu;
static const fake_gpu *g_box;
static int g_nbox;

static int fake_handle(const char *pci, void **dev) {
  for (int i = 0; i < g_nbox; i++)
    if (strcmp(g_box[i].pci, pci) == 0) {
      *dev = (void *)&g_box[i];
      return 0;
    }
  return 13; /* NVML_ERROR_NOT_FOUND */
}

static int fake_active(void *dev, unsigned link, int *active) {
  *active = ((const fake_gpu *)dev)->remote[link] != NULL;
  return 0;
}

static int fake_remote(void *dev, unsigned link, char *bus_id, size_t len) {
  snprintf(bus_id, len, "%s", ((const fake_gpu *)dev)->remote[link]);
  return 0;
}

static const weft__nvml_calls fake_nvml = {fake_handle, fake_active, fake_remote};

static void host_with(weft__topo_host *h, int ngpus, const char *const *pcis) {
  memset(h, 0, sizeof(*h));
  weft__topo_add_device(h, "nic", "eth0", "", 0);
  for (int i = 0; i < ngpus; i++) weft__topo_add_device(h, "gpu", "", pcis[i], 0);
}

/* Three GPUs: 0-1 by four direct links (NVML names the far end in its own 8-digit upper-case
 * form), 1-2 by two, 0-2 none; GPU 3 is not in NVML at all. */
static void nvlinks_between_gpu_pairs_are_counted_as_nv(void **state) {
  (void)state;
  static const fake_gpu box[] = {
      {"0000:3b:00.0", {"00000000:5E:00.0", "00000000:5E:00.0", "00000000:5E:00.0", "00000000:5E:00.0"}},
      {"0000:5e:00.0", {"00000000:3B:00.0", "00000000:3B:00.0", "00000000:3B:00.0", "00000000:3B:00.0",
                        NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                        "00000000:86:00.0", "00000000:86:00.0"}},
      {"0000:86:00.0", {"00000000:5E:00.0", NULL, "00000000:5E:00.0"}},
  };
  static const char *const pcis[] = {"0000:3b:00.0", "0000:5e:00.0", "0000:86:00.0", "0000:af:00.0"};
  g_box = box;
  g_nbox = 3;
  weft__topo_host h;
  host_with(&h, 4, pcis); /* devices: eth0, then GPUs 1..4 */
  weft__topo_count_nvlinks(&h, &fake_nvml);
  assert_int_equal(h.nvlink_known, 1);
  assert_int_equal(h.nvlinks[1][2], 4);
  assert_int_equal(h.nvlinks[2][1], 4);
  assert_int_equal(h.nvlinks[2][3], 2);
  assert_int_equal(h.nvlinks[1][3], 0);
  assert_int_equal(h.nvlinks[1][4], 0);
  assert_int_equal(h.nvlinks[0][1], 0); /* the NIC */
  int nv;
  assert_int_equal(weft__topo_device_link(&h, 1, 2, &nv), WEFT__PCI_NVLINK);
  assert_int_equal(nv, 4);
  assert_string_equal(weft__topo_pci_link_name(WEFT__PCI_NVLINK), "NV");
  assert_int_not_equal(weft__topo_device_link(&h, 1, 3, &nv), WEFT__PCI_NVLINK);
  assert_int_equal(nv, 0);
  h.nvlink_known = 0; /* without NVML the table is not trusted */
  assert_int_not_equal(weft__topo_device_link(&h, 1, 2, &nv), WEFT__PCI_NVLINK);
}

/* An HGX-like board: every GPU's links go to NVSwitches (far ends that are no GPU): every
 * pair is joined by the fewer of the two GPUs' switch links. */
static void links_to_nvswitches_join_every_pair(void **state) {
  (void)state;
  static fake_gpu box[3];
  static const char *const pcis[] = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"};
  memset(box, 0, sizeof(box));
  for (int g = 0; g < 3; g++) {
    box[g].pci = pcis[g];
    for (int l = 0; l < (g == 2 ? 12 : 18); l++) box[g].remote[l] = l % 2 ? "00000000:C5:00.0" : "00000000:C6:00.0";
  }
  g_box = box;
  g_nbox = 3;
  weft__topo_host h;
  host_with(&h, 3, pcis);
  weft__topo_count_nvlinks(&h, &fake_nvml);
  assert_int_equal(h.nvlinks[1][2], 18);
  assert_int_equal(h.nvlinks[1][3], 12);
  assert_int_equal(h.nvlinks[3][2], 12);
}

/* Without NVML (no such library): nothing is claimed. */
static void without_nvml_nvlink_stays_unknown(void **state) {
  (void)state;
  static const char *const pcis[] = {"0000:3b:00.0"};
  weft__topo_host h;
  host_with(&h, 1, pcis);
  setenv("WEFT_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  weft__topo_discover_nvlink(&h);
  unsetenv("WEFT_NVML_LIBRARY");
  assert_int_equal(h.nvlink_known, 0);
  for (int i = 0; i < WEFT__TOPO_MAX_DEVICES; i++)
    for (int j = 0; j < WEFT__TOPO_MAX_DEVICES; j++) assert_int_equal(h.nvlinks[i][j], 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(x_is_the_device_itself),
      cmocka_unit_test(pix_is_one_switch_or_one_device_between),
      cmocka_unit_test(pxb_is_several_switches_below_one_root_port),
      cmocka_unit_test(phb_is_two_root_ports_of_one_host_bridge),
      cmocka_unit_test(node_is_two_host_bridges_of_one_numa_node),
      cmocka_unit_test(sys_is_across_numa_nodes_or_an_unknown_node),
      cmocka_unit_test(unknown_without_a_pci_path),
      cmocka_unit_test(a_prefix_before_the_host_bridge_is_ignored),
      cmocka_unit_test(nvlinks_between_gpu_pairs_are_counted_as_nv),
      cmocka_unit_test(links_to_nvswitches_join_every_pair),
      cmocka_unit_test(without_nvml_nvlink_stays_unknown),
  };
  return cmocka_run_group_tests_name("test_pci_link", tests, NULL, NULL);
}

/* test_topo.c: topology discovery, merge, link classes and XML of topo/, and weft-topo run
 * for real through ./weftrun on 2 ranks (matrix, dump then load, --probe with small sizes);
 * the communicator's own view: ring order, WEFT_TOPO_DUMP_FILE / WEFT_TOPO_FILE at init
 * (a file reshaping one machine into two hosts changes the ring and the transports), and
 * the progress thread's placement.
 * The tool tests need the build directory (WEFT_TOP_BUILDDIR, set by make check); without
 * it they pass with a TAP SKIP directive in their name. */
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "lib/comm.h"
#include "lib/cpu_key.h"
#include "tests/harness.h"
#include "topo/topo.h"
#include "transports/transport.h"

static void check_discovery_is_sane(void) {
  weft__topo_summary s;
  weft__topo_discover(&s);
  assert_int_equal(s.magic, WEFT__TOPO_MAGIC);
  assert_true(s.host.pus >= 1);
  assert_true(s.host.cores >= 1 && s.host.cores <= s.host.pus);
  assert_true(s.host.packages >= 1);
  assert_true(s.host.numa_nodes >= 1);
  assert_true(weft__topo_cpuset_count(s.self.cpuset) >= 1);
  assert_true(weft__topo_cpuset_count(s.self.cpuset) <= s.host.pus);
  assert_true(s.self.numa >= -1 && s.self.numa < 1024);
  assert_true(s.host.hostname[0] != '\0');
  assert_int_equal(s.self.pid, getpid());
  assert_true(s.host.ndevices >= 0 && s.host.ndevices <= WEFT__TOPO_MAX_DEVICES);
}

static void discovery_sees_cores_numa_and_cpus_on_this_machine(void **state) {
  unsetenv("WEFT_TOPO_HWLOC");
  check_discovery_is_sane();
}

static void sysfs_fallback_sees_the_same_cpu_counts(void **state) {
  weft__topo_summary a, b;
  unsetenv("WEFT_TOPO_HWLOC");
  weft__topo_discover(&a);
  setenv("WEFT_TOPO_HWLOC", "0", 1);
  check_discovery_is_sane();
  weft__topo_discover(&b);
  unsetenv("WEFT_TOPO_HWLOC");
  assert_int_equal(strncmp(b.host.discovery, "sysfs", 5), 0);
  assert_int_equal(a.host.pus, b.host.pus);
  assert_int_equal(a.host.cores, b.host.cores);
  assert_int_equal(a.host.numa_nodes, b.host.numa_nodes);
  assert_int_equal(a.self.numa, b.self.numa);
  /* The fallback sees caches only where the kernel lists them; hwloc also reads CPUID. Some
   * VMs' kernels list none (no /sys/devices/system/cpu/cpu0/cache: the AMD EPYC VM of
   * 2026-11-27, where hwloc counts 2 L3s from CPUID): there the fallback must say it knows
   * none, never a wrong count. */
  if (access("/sys/devices/system/cpu/cpu0/cache", F_OK) != 0) {
    printf("# no /sys/devices/system/cpu/cpu0/cache: the fallback's L3s are unknown (hwloc: %d)\n",
           a.host.l3_caches);
    assert_int_equal(b.host.l3_caches, 0);
    assert_int_equal(b.self.core_group, -1);
    return;
  }
  assert_int_equal(a.host.l3_caches, b.host.l3_caches);
  assert_int_equal(a.self.core_group, b.self.core_group);
}

static void cpuset_list_form_round_trips(void **state) {
  uint8_t set[WEFT__TOPO_MAX_CPUS / 8];
  char buf[256];
  assert_int_equal(weft__topo_cpuset_parse("0-3,8,10-11", set), 0);
  assert_int_equal(weft__topo_cpuset_count(set), 7);
  weft__topo_cpuset_str(set, buf, sizeof(buf));
  assert_string_equal(buf, "0-3,8,10-11");
  assert_int_equal(weft__topo_cpuset_parse("", set), 0);
  weft__topo_cpuset_str(set, buf, sizeof(buf));
  assert_string_equal(buf, "");
  assert_int_equal(weft__topo_cpuset_parse("3-1", set), -1);
  assert_int_equal(weft__topo_cpuset_parse("0,x", set), -1);
  assert_int_equal(weft__topo_cpuset_parse("5000", set), -1);
}

/* A synthetic summary: host hash, NUMA node, L3, CPUs. */
static void fake(weft__topo_summary *s, int rank, uint64_t hash, const char *hostname, int numa,
                 int l3, const char *cpus) {
  memset(s, 0, sizeof(*s));
  s->magic = WEFT__TOPO_MAGIC;
  s->rank = rank;
  s->host.hash = hash;
  snprintf(s->host.hostname, sizeof(s->host.hostname), "%s", hostname);
  snprintf(s->host.discovery, sizeof(s->host.discovery), "hwloc");
  s->host.packages = 2;
  s->host.numa_nodes = 2;
  s->host.cores = 8;
  s->host.pus = 16;
  s->host.l3_caches = 4;
  weft__topo_add_device(&s->host, "nic", "eth0", "0000:17:00.0", 0);
  weft__topo_add_device(&s->host, "gpu", "cuda0", "0000:3b:00.0", 1);
  weft__topo_add_device(&s->host, "gpu", "nvml0", "0000:3b:00.0", 1); /* same GPU: dropped */
  s->self.numa = numa;
  s->self.core_group = l3;
  s->self.pid = 1000 + rank;
  s->self.nic_speed_mbps = 25000;
  s->self.nic_numa = 0;
  snprintf(s->self.nic, sizeof(s->self.nic), "eth0");
  assert_int_equal(weft__topo_cpuset_parse(cpus, s->self.cpuset), 0);
}

/* 6 ranks: 0,1 share an L3; 2 same NUMA as 0 but another L3; 3 on the other NUMA node;
 * 4 spans both nodes (unbound); 5 on another host. */
static void six_ranks(weft__topo_system *sys) {
  weft__topo_summary s[6];
  fake(&s[0], 0, 0xa, "node-a", 0, 0, "0-1");
  fake(&s[1], 1, 0xa, "node-a", 0, 0, "2-3");
  fake(&s[2], 2, 0xa, "node-a", 0, 1, "4-5");
  fake(&s[3], 3, 0xa, "node-a", 1, 2, "8-9");
  fake(&s[4], 4, 0xa, "node-a", -1, -1, "0-15");
  fake(&s[5], 5, 0xb, "node-b \"<&>'", 0, 0, "0-1");
  assert_int_equal(weft__topo_merge(s, 6, sys), WEFT_SUCCESS);
}

static void link_classes_of_synthetic_ranks(void **state) {
  weft__topo_system sys;
  six_ranks(&sys);
  assert_int_equal(sys.nhosts, 2);
  assert_int_equal(sys.hosts[0].nranks, 5);
  assert_int_equal(sys.hosts[1].nranks, 1);
  assert_int_equal(sys.hosts[0].ndevices, 2);
  assert_int_equal(sys.ranks[5].host, 1);
  assert_int_equal(sys.ranks[5].local_rank, 0);
  assert_int_equal(sys.ranks[3].local_rank, 3);
  assert_int_equal(weft__topo_link(&sys, 0, 0), WEFT__LINK_SELF);
  assert_int_equal(weft__topo_link(&sys, 0, 1), WEFT__LINK_L3);
  assert_int_equal(weft__topo_link(&sys, 1, 0), WEFT__LINK_L3);
  assert_int_equal(weft__topo_link(&sys, 0, 2), WEFT__LINK_NUMA);
  assert_int_equal(weft__topo_link(&sys, 0, 3), WEFT__LINK_HOST);
  assert_int_equal(weft__topo_link(&sys, 4, 0), WEFT__LINK_HOST);
  assert_int_equal(weft__topo_link(&sys, 4, 3), WEFT__LINK_HOST);
  assert_int_equal(weft__topo_link(&sys, 0, 5), WEFT__LINK_NET);
  assert_int_equal(weft__topo_link(&sys, 5, 4), WEFT__LINK_NET);
  assert_string_equal(weft__topo_link_name(WEFT__LINK_NET), "NET");
  weft__topo_system_free(&sys);
}

static void merge_rejects_a_summary_of_another_build(void **state) {
  weft__topo_summary s[2];
  weft__topo_system sys;
  fake(&s[0], 0, 1, "a", 0, 0, "0");
  fake(&s[1], 1, 1, "a", 0, 0, "1");
  s[1].magic = 0;
  assert_int_equal(weft__topo_merge(s, 2, &sys), WEFT_ERR_INVALID_ARGUMENT);
}

/* Found by tests/fuzz/fuzz_topo_summary.c: a summary off the wire with a device count past
 * the array, or a name without its NUL, was merged, and weft__topo_pick_hca then read past
 * the host. The merge must refuse it, naming the rank. */
static void merge_rejects_a_summary_with_a_bad_device_count_or_unterminated_names(void **state) {
  weft__topo_summary s[2];
  weft__topo_system sys;
  int32_t counts[] = {-1, WEFT__TOPO_MAX_DEVICES + 1, 1000};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    fake(&s[0], 0, 1, "a", 0, 0, "0");
    fake(&s[1], 1, 1, "a", 0, 0, "1");
    s[1].host.ndevices = counts[i];
    assert_int_equal(weft__topo_merge(s, 2, &sys), WEFT_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(weft_get_last_error(NULL), "rank 1"));
  }
  fake(&s[0], 0, 1, "a", 0, 0, "0");
  fake(&s[1], 1, 1, "a", 0, 0, "1");
  s[1].host.ndevices = 1;
  memset(s[1].host.devices[0].kind, 'x', sizeof s[1].host.devices[0].kind);
  assert_int_equal(weft__topo_merge(s, 2, &sys), WEFT_ERR_INVALID_ARGUMENT);
  fake(&s[1], 1, 1, "a", 0, 0, "1");
  memset(s[1].self.nic, 'n', sizeof s[1].self.nic);
  assert_int_equal(weft__topo_merge(s, 2, &sys), WEFT_ERR_INVALID_ARGUMENT);
  fake(&s[1], 1, 1, "a", 0, 0, "1");
  memset(s[1].host.cpu, 'c', sizeof s[1].host.cpu); /* the tuner would read past it */
  assert_int_equal(weft__topo_merge(s, 2, &sys), WEFT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(weft_get_last_error(NULL), "CPU"));
  /* A host's ranks all see its first rank's CPU, as the tuner's fitted rows must be the same
   * on every rank (lib/select.c). */
  fake(&s[0], 0, 1, "a", 0, 0, "0");
  fake(&s[1], 1, 1, "a", 0, 0, "1");
  snprintf(s[0].host.cpu, sizeof s[0].host.cpu, "GenuineIntel 6/167");
  snprintf(s[1].host.cpu, sizeof s[1].host.cpu, "AuthenticAMD 26/2");
  assert_int_equal(weft__topo_merge(s, 2, &sys), WEFT_SUCCESS);
  assert_int_equal(sys.nhosts, 1);
  assert_string_equal(sys.hosts[0].cpu, "GenuineIntel 6/167");
  weft__topo_system_free(&sys);
  fake(&s[1], 1, 1, "a", 0, 0, "1");
  s[1].host.ndevices = WEFT__TOPO_MAX_DEVICES; /* the most a host may list */
  assert_int_equal(weft__topo_merge(s, 2, &sys), WEFT_SUCCESS);
  weft__topo_system_free(&sys);
}

static char *temp_path(const char *tag) {
  char *path;
  assert_true(asprintf(&path, "%s/weft_topo_%s_%d.xml", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
                       tag, (int)getpid()) > 0);
  return path;
}

static void xml_round_trip_gives_the_same_view(void **state) {
  weft__topo_system sys, back;
  six_ranks(&sys);
  snprintf(sys.hosts[0].cpu, sizeof sys.hosts[0].cpu, "GenuineIntel 6/167");
  char *path = temp_path("rt");
  assert_int_equal(weft__topo_xml_dump(&sys, path), WEFT_SUCCESS);
  assert_int_equal(weft__topo_xml_load(path, &back), WEFT_SUCCESS);
  assert_true(weft__topo_system_equal(&sys, &back));
  assert_string_equal(back.hosts[1].hostname, "node-b \"<&>'");
  assert_string_equal(back.source, path);
  weft__topo_system_free(&back);
  weft__topo_system_free(&sys);

  weft__topo_summary me; /* and this machine's real view */
  weft__topo_discover(&me);
  assert_int_equal(weft__topo_merge(&me, 1, &sys), WEFT_SUCCESS);
  assert_int_equal(weft__topo_xml_dump(&sys, path), WEFT_SUCCESS);
  assert_int_equal(weft__topo_xml_load(path, &back), WEFT_SUCCESS);
  assert_true(weft__topo_system_equal(&sys, &back));
  weft__topo_system_free(&back);
  weft__topo_system_free(&sys);
  unlink(path);
  free(path);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void xml_load_names_the_line_of_an_error(void **state) {
  char *path = temp_path("bad");
  weft__topo_system sys;
  write_file(path, "<weft-topology version=\"1\" nranks=\"1\" nhosts=\"1\">\n"
                   "  <host index=\"0\" hostname=\"a\" hash=\"0x1\" discovery=\"sysfs\" packages=\"1\"\n"
                   "        numa-nodes=\"1\" cores=\"1\" pus=\"1\" l3-caches=\"0\"/>\n"
                   "  <rank index=\"0\" host=\"3\" numa=\"0\" core-group=\"-1\" cpuset=\"0\" nic=\"\"\n"
                   "        nic-speed-mbps=\"-1\" nic-numa=\"-1\" pid=\"1\"/>\n"
                   "</weft-topology>\n");
  assert_int_equal(weft__topo_xml_load(path, &sys), WEFT_ERR_INVALID_ARGUMENT);
  /* libxml2 numbers an element by the line its start tag ends on */
  assert_non_null(strstr(weft_get_last_error(NULL), ":5: <rank>: attribute host=\"3\""));
  write_file(path, "<weft-topology version=\"1\" nranks=\"2\" nhosts=\"1\">\n</weft-topology>\n");
  assert_int_equal(weft__topo_xml_load(path, &sys), WEFT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(weft_get_last_error(NULL), "no <rank index=\"0\">"));
  write_file(path, "<weft-topology version='1' nranks='1' nhosts='1'>\n"
                   "  <host index='0' hostname='a'\n");
  assert_int_equal(weft__topo_xml_load(path, &sys), WEFT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(weft_get_last_error(NULL), "not well-formed XML"));
  /* Found by tests/fuzz/fuzz_topo_xml.c: a host index given twice was merged into one host
   * and the other host left all zero; a host never given was all zero too. */
  write_file(path, "<weft-topology version='1' nranks='2' nhosts='2'>\n"
                   "  <host index='0' hostname='a' hash='1' discovery='sysfs' packages='1' numa-nodes='1' cores='1' pus='1' l3-caches='0'/>\n"
                   "  <host index='0' hostname='b' hash='2' discovery='sysfs' packages='1' numa-nodes='1' cores='1' pus='1' l3-caches='0'/>\n"
                   "  <rank index='0' host='0' numa='0' core-group='-1' cpuset='0' nic='' nic-speed-mbps='-1' nic-numa='-1' pid='1'/>\n"
                   "  <rank index='1' host='1' numa='0' core-group='-1' cpuset='0' nic='' nic-speed-mbps='-1' nic-numa='-1' pid='2'/>\n"
                   "</weft-topology>\n");
  assert_int_equal(weft__topo_xml_load(path, &sys), WEFT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(weft_get_last_error(NULL), ":3: <host>: host 0 given twice"));
  write_file(path, "<weft-topology version='1' nranks='2' nhosts='2'>\n"
                   "  <host index='1' hostname='b' hash='2' discovery='sysfs' packages='1' numa-nodes='1' cores='1' pus='1' l3-caches='0'/>\n"
                   "  <rank index='0' host='1' numa='0' core-group='-1' cpuset='0' nic='' nic-speed-mbps='-1' nic-numa='-1' pid='1'/>\n"
                   "  <rank index='1' host='1' numa='0' core-group='-1' cpuset='1' nic='' nic-speed-mbps='-1' nic-numa='-1' pid='2'/>\n"
                   "</weft-topology>\n");
  assert_int_equal(weft__topo_xml_load(path, &sys), WEFT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(weft_get_last_error(NULL), "no <host index=\"0\">"));
  unlink(path);
  assert_int_equal(weft__topo_xml_load(path, &sys), WEFT_ERR_SYSTEM);
  free(path);
}

/* Any well-formed XML: single-quoted attributes, a DOCTYPE, CDATA and comments between
 * elements, character references, attributes over several lines, unknown elements and
 * attributes (ignored), elements in any order. The hand-written parser refused the first. */
static void xml_load_accepts_any_well_formed_xml(void **state) {
  char *path = temp_path("any");
  weft__topo_system sys;
  write_file(path, "<?xml version='1.0' encoding='UTF-8'?>\n"
                   "<!DOCTYPE weft-topology>\n"
                   "<!-- edited by hand -->\n"
                   "<weft-topology nhosts='1' version='1' nranks='2' comment=\"newer field\">\n"
                   "  <rank index='1' host='0' numa='0' core-group='-1' cpuset='1' nic='eth0'\n"
                   "        nic-speed-mbps='-1' nic-numa='-1' pid='42' future='x'/>\n"
                   "  <notes><![CDATA[ <rank index='9'/> is not a rank ]]></notes>\n"
                   "  <host index='0' hostname='n&#x6f;de&amp;1' hash='0x1f' discovery='sysfs'\n"
                   "        packages='1' numa-nodes='1' cores='2' pus='2' l3-caches='1'>\n"
                   "    <device kind='nic' name='eth0' pci='0000:00:03.0' numa='0' speed-mbps='25000'></device>\n"
                   "  </host>\n"
                   "  <rank cpuset='0' index='0' host='0' numa='0' core-group='-1' nic='eth0'\n"
                   "        nic-speed-mbps='-1' nic-numa='-1' pid='41'/>\n"
                   "</weft-topology>\n");
  assert_int_equal(weft__topo_xml_load(path, &sys), WEFT_SUCCESS);
  assert_int_equal(sys.nranks, 2);
  assert_string_equal(sys.hosts[0].hostname, "node&1");
  assert_int_equal(sys.hosts[0].hash, 0x1f);
  assert_int_equal(sys.hosts[0].ndevices, 1);
  assert_int_equal(sys.hosts[0].devices[0].speed_mbps, 25000);
  assert_int_equal(sys.hosts[0].nranks, 2);
  assert_int_equal(sys.ranks[1].pid, 42);
  assert_int_equal(sys.ranks[1].local_rank, 1);
  weft__topo_system_free(&sys);
  unlink(path);
  free(path);
}

/* ---------------------------------------------------------------------------------- */
/* Ranks use the HCA on their NUMA node, spread over the node's HCAs; the view keeps each
 * HCA's PCI path through XML. */
static void ranks_take_the_nearest_hca_spread_over_a_nodes_hcas(void **state) {
  (void)state;
  weft__topo_summary s[5];
  fake(&s[0], 0, 0xa, "node-a", 0, 0, "0-1");
  fake(&s[1], 1, 0xa, "node-a", 0, 0, "2-3");
  fake(&s[2], 2, 0xa, "node-a", 1, 2, "8-9");
  fake(&s[3], 3, 0xa, "node-a", -1, -1, "0-15");
  fake(&s[4], 4, 0xb, "node-b", 0, 0, "0-1");
  for (int r = 0; r < 4; r++) {
    weft__topo_add_device(&s[r].host, "ib", "mlx5_0", "0000:81:00.0", 0);
    weft__topo_add_device(&s[r].host, "ib", "mlx5_1", "0000:82:00.0", 0);
    weft__topo_add_device(&s[r].host, "roce", "mlx5_2", "0000:c1:00.0", 1);
    snprintf(s[r].host.devices[s[r].host.ndevices - 1].path, 128, "/sys/devices/pci0000:c0/0000:c1:00.0");
  }
  weft__topo_system sys;
  assert_int_equal(weft__topo_merge(s, 5, &sys), WEFT_SUCCESS);
  const char *want[] = {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_0"}; /* rank 3 spans nodes: any, 4th of its host */
  for (int r = 0; r < 4; r++) {
    int i = weft__topo_pick_hca(&sys, r);
    assert_true(i >= 0);
    assert_string_equal(sys.hosts[0].devices[i].name, want[r]);
  }
  assert_int_equal(weft__topo_pick_hca(&sys, 4), -1); /* node-b has no HCA */
  char *path = temp_path("hca");
  assert_int_equal(weft__topo_xml_dump(&sys, path), WEFT_SUCCESS);
  weft__topo_system back;
  assert_int_equal(weft__topo_xml_load(path, &back), WEFT_SUCCESS);
  assert_true(weft__topo_system_equal(&sys, &back));
  int roce = weft__topo_pick_hca(&back, 2);
  assert_string_equal(back.hosts[0].devices[roce].path, "/sys/devices/pci0000:c0/0000:c1:00.0");
  unlink(path);
  free(path);
  weft__topo_system_free(&back);
  weft__topo_system_free(&sys);
}

/* Every NIC and GPU with a PCI address gets the sysfs path of its PCI function, ending in
 * that address, from either back end. */
static void discovery_gives_nics_and_gpus_their_pci_path(void **state) {
  (void)state;
  for (int hw = 0; hw < 2; hw++) {
    weft__topo_summary s;
    setenv("WEFT_TOPO_HWLOC", hw ? "1" : "0", 1);
    weft__topo_discover(&s);
    for (int i = 0; i < s.host.ndevices; i++) {
      const weft__topo_device *d = &s.host.devices[i];
      if ((strcmp(d->kind, "nic") != 0 && strcmp(d->kind, "gpu") != 0) || d->pci[0] == '\0') continue;
      print_message("# %s %s %s: %s\n", s.host.discovery, d->kind, d->pci, d->path);
      size_t n = strlen(d->path), m = strlen(d->pci);
      assert_true(n > m && strcmp(d->path + n - m, d->pci) == 0 && d->path[n - m - 1] == '/');
      assert_non_null(strstr(d->path, "/pci"));
    }
  }
  unsetenv("WEFT_TOPO_HWLOC");
}

/* The device paths, local CPUs and NVLink counts survive the XML file. */
static void xml_keeps_device_paths_cpus_and_nvlinks(void **state) {
  (void)state;
  weft__topo_summary s[2];
  fake(&s[0], 0, 0xa, "node-a", 0, 0, "0-1");
  fake(&s[1], 1, 0xb, "node-b", 0, 0, "0-1");
  weft__topo_host *h = &s[0].host;
  weft__topo_add_device(h, "gpu", "cuda1", "0000:5e:00.0", 1);
  snprintf(h->devices[1].path, sizeof(h->devices[1].path), "/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0");
  assert_int_equal(weft__topo_cpuset_parse("8-15", h->devices[1].cpus), 0);
  h->nvlinks[1][2] = h->nvlinks[2][1] = 12;
  h->nvlink_known = 1;
  s[1].host.nvlink_known = 0; /* and a host NVML did not answer for */
  weft__topo_system sys, back;
  assert_int_equal(weft__topo_merge(s, 2, &sys), WEFT_SUCCESS);
  char *path = temp_path("nvlink");
  assert_int_equal(weft__topo_xml_dump(&sys, path), WEFT_SUCCESS);
  assert_int_equal(weft__topo_xml_load(path, &back), WEFT_SUCCESS);
  assert_true(weft__topo_system_equal(&sys, &back));
  assert_int_equal(back.hosts[0].nvlinks[2][1], 12);
  assert_int_equal(back.hosts[0].nvlink_known, 1);
  assert_int_equal(back.hosts[1].nvlink_known, 0);
  assert_int_equal(weft__topo_cpuset_count(back.hosts[0].devices[1].cpus), 8);
  weft__topo_system_free(&back);
  weft__topo_system_free(&sys);
  unlink(path);
  free(path);
}

/* weft-topo through weftrun */

static void skipped(void **state) {}

static const char *builddir(void) {
  const char *dir = getenv("WEFT_TOP_BUILDDIR");
  if (dir == NULL) return NULL;
  char p[4096];
  snprintf(p, sizeof(p), "%s/weft-topo", dir);
  if (access(p, X_OK) != 0) return NULL;
  snprintf(p, sizeof(p), "%s/weftrun", dir);
  if (access(p, X_OK) != 0) return NULL;
  return dir;
}

/* Runs "cd builddir && ENV timeout 60 ./weftrun -n N ./weft-topo ARGS" into a string;
 * prints the output as TAP comments when the exit status is not the one expected
 * (expect_ok: 0, else non-zero). */
static char *run_tool(const char *env, int n, const char *args, int expect_ok, int *status) {
  char *out = temp_path("out"), *cmd;
  assert_true(asprintf(&cmd, "cd '%s' && %s timeout 60 ./weftrun -n %d ./weft-topo %s >'%s' 2>&1",
                       builddir(), env, n, args, out) > 0);
  *status = system(cmd);
  free(cmd);
  FILE *f = fopen(out, "r");
  assert_non_null(f);
  char *text = calloc(1, 1 << 20);
  size_t len = fread(text, 1, (1 << 20) - 1, f);
  text[len] = '\0';
  fclose(f);
  unlink(out);
  free(out);
  if ((*status == 0) != expect_ok) {
    print_message("# exit status %d, output:\n", *status);
    char *copy = strdup(text), *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
      print_message("#   %s\n", line);
    free(copy);
    fflush(stdout);
  }
  return text;
}

/* The col-th cell (0-based) of the device matrix row labelled row ("GPU0", "NIC1") in out,
 * into cell; 0, or -1 when there is no such row or cell. */
static int matrix_cell(const char *out, const char *row, int col, char *cell) {
  char key[32];
  snprintf(key, sizeof(key), "\n  %s ", row);
  const char *p = strstr(out, key);
  if (p == NULL) return -1;
  p += strlen(key);
  for (int c = 0; c <= col; c++) {
    int used = 0;
    if (sscanf(p, "%15s%n", cell, &used) != 1) return -1;
    p += used;
  }
  return 0;
}

/* A view of a 2-socket GPU box loaded with WEFT_TOPO_FILE: weft-topo prints its devices as
 * nvidia-smi topo -m does, with NVLink from the file, each GPU's nearest NIC, and no NVLink
 * claim for a file without NVML's counts. */
static void weft_topo_prints_the_device_matrix_of_a_gpu_box(void **state) {
  (void)state;
  static const char *box =
      "<weft-topology version='1' nranks='2' nhosts='1'>\n"
      "  <host index='0' hostname='gpubox' hash='0x1' discovery='hwloc' packages='2' numa-nodes='2'\n"
      "        cores='16' pus='32' l3-caches='2' %s>\n"
      "    <device kind='nic' name='eth0' pci='0000:04:00.0' numa='0' speed-mbps='25000'\n"
      "            path='/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0'/>\n"
      "    <device kind='gpu' name='cuda0' pci='0000:03:00.0' numa='0' speed-mbps='-1' cpus='0-7,16-23'\n"
      "            path='/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0'/>\n"
      "    <device kind='ib' name='mlx5_0' pci='0000:83:00.0' numa='1' speed-mbps='200000'\n"
      "            path='/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:00.0/0000:83:00.0'/>\n"
      "    <device kind='gpu' name='cuda1' pci='0000:84:00.0' numa='1' speed-mbps='-1' cpus='8-15,24-31'\n"
      "            path='/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:01.0/0000:84:00.0'/>\n"
      "    <device kind='gpu' name='cuda2' pci='0000:c1:00.0' numa='1' speed-mbps='-1'\n"
      "            path='/sys/devices/pci0000:c0/0000:c0:01.0/0000:c1:00.0'/>\n"
      "    <nvlink a='1' b='3' links='12'/>\n"
      "  </host>\n"
      "  <rank index='0' host='0' numa='0' core-group='0' cpuset='0-1' nic='eth0' nic-speed-mbps='25000'\n"
      "        nic-numa='0' pid='1'/>\n"
      "  <rank index='1' host='0' numa='1' core-group='1' cpuset='8-9' nic='eth0' nic-speed-mbps='25000'\n"
      "        nic-numa='0' pid='2'/>\n"
      "</weft-topology>\n";
  char *xml = temp_path("gpubox"), *text, *env;
  assert_true(asprintf(&text, box, "nvlink='nvml'") > 0);
  write_file(xml, text);
  free(text);
  assert_true(asprintf(&env, "WEFT_TOPO_FILE='%s'", xml) > 0);
  int st;
  char *out = run_tool(env, 2, "", 1, &st), cell[16];
  assert_int_equal(st, 0);
  /* columns: GPU0 GPU1 GPU2 NIC0 NIC1, CPU Affinity, NUMA Affinity */
  static const char *want[5][7] = {
      {"X", "NV12", "SYS", "PIX", "SYS", "0-7,16-23", "0"},
      {"NV12", "X", "NODE", "SYS", "PIX", "8-15,24-31", "1"},
      {"SYS", "NODE", "X", "SYS", "NODE", "-", "1"},
      {"PIX", "SYS", "SYS", "X", "SYS", "-", "0"},
      {"SYS", "PIX", "NODE", "SYS", "X", "-", "1"},
  };
  static const char *rows[5] = {"GPU0", "GPU1", "GPU2", "NIC0", "NIC1"};
  for (int r = 0; r < 5; r++)
    for (int c = 0; c < 7; c++) {
      assert_int_equal(matrix_cell(out, rows[r], c, cell), 0);
      if (strcmp(cell, want[r][c]) != 0) print_message("# %s column %d: %s, expected %s\n", rows[r], c, cell, want[r][c]);
      assert_string_equal(cell, want[r][c]);
    }
  assert_non_null(strstr(out, "  NIC0 = eth0, NIC1 = mlx5_0\n"));
  assert_non_null(strstr(out, "GPU-NIC affinity: GPU0 -> NIC0 (eth0, PIX), GPU1 -> NIC1 (mlx5_0, PIX), "
                              "GPU2 -> NIC1 (mlx5_0, NODE)\n"));
  assert_non_null(strstr(out, "NVLink: 1 GPU pair linked (NVML)"));
  assert_non_null(strstr(out, "NV#  = a bonded set of # NVLinks"));
  free(out);
  /* The same box without NVML's counts: PCI links only, and NVLink unknown. */
  assert_true(asprintf(&text, box, "") > 0);
  write_file(xml, text);
  free(text);
  out = run_tool(env, 2, "", 1, &st);
  assert_int_equal(st, 0);
  assert_int_equal(matrix_cell(out, "GPU0", 1, cell), 0);
  assert_string_equal(cell, "SYS");
  assert_non_null(strstr(out, "NVLink: unknown (no NVML)"));
  free(out);
  unlink(xml);
  free(xml);
  free(env);
}

/* weft-topo lists the HCAs of the verbs emulator (when it is built) with link layer, PCI
 * address and path, NUMA node and speed, and which one each rank takes. */
static void weft_topo_lists_emulated_hcas_and_each_ranks_pick(void **state) {
  char lib[4096], dir[] = "/dev/shm/weft-topo-emu.XXXXXX", *env;
  snprintf(lib, sizeof(lib), "%s/tests/verbs_emu/.libs/libweft_verbs_emu.so", builddir());
  if (access(lib, R_OK) != 0) {
    print_message("# verbs emulator not built (no verbs headers): nothing to list\n");
    return;
  }
  assert_non_null(mkdtemp(dir));
  assert_true(asprintf(&env, "WEFT_IB_LIBRARY='%s' WEFT_VERBS_EMU_DIR='%s' WEFT_VERBS_EMU_DEVICES="
                       "'mlx5_0,numa=0,pci=0000:81:00.0,speed=200;mlx5_1,link=roce,numa=1,pci=0000:c1:00.0'",
                       lib, dir) > 0);
  int st;
  char *out = run_tool(env, 2, "", 1, &st), *rm;
  assert_true(asprintf(&rm, "rm -rf '%s'", dir) > 0);
  assert_int_equal(system(rm), 0); /* before any check can fail: nothing left in /dev/shm */
  free(rm);
  assert_int_equal(st, 0);
  assert_non_null(strstr(out, "IB   mlx5_0     PCI 0000:81:00.0  NUMA 0   speed 200G"));
  assert_non_null(strstr(out, "RoCE mlx5_1     PCI 0000:c1:00.0  NUMA 1   speed 100G"));
  assert_non_null(strstr(out, "/devices/pci0000:c1/0000:c1:00.0"));
  /* Both ranks run on this machine's node 0 (or span it): node 0's HCA when known. */
  assert_non_null(strstr(out, "HCA per rank"));
  assert_non_null(strstr(out, "  rank0    mlx5_"));
  /* In the device matrix the two HCAs, on different host bridges and NUMA nodes, are SYS. */
  const char *names = strstr(out, "  NIC0 = ");
  assert_non_null(names);
  int k0 = -1, k1 = -1;
  for (int k = 0; k < WEFT__TOPO_MAX_DEVICES; k++) {
    char want[32];
    snprintf(want, sizeof(want), "NIC%d = mlx5_0", k);
    if (strstr(names, want) != NULL) k0 = k;
    snprintf(want, sizeof(want), "NIC%d = mlx5_1", k);
    if (strstr(names, want) != NULL) k1 = k;
  }
  assert_true(k0 >= 0 && k1 >= 0);
  char row[16], cell[16];
  snprintf(row, sizeof(row), "NIC%d", k0);
  assert_int_equal(matrix_cell(out, row, k1, cell), 0); /* no GPU on this machine: NICs only */
  assert_string_equal(cell, "SYS");
  free(env);
  free(out);
}

static void weft_topo_on_2_ranks_prints_the_matrix(void **state) {
  int st;
  char *out = run_tool("", 2, "", 1, &st);
  assert_int_equal(st, 0);
  assert_non_null(strstr(out, "weft-topo: 2 ranks on 1 host (detected)"));
  assert_non_null(strstr(out, "Host 0: "));
  assert_non_null(strstr(out, "NUMA node"));
  char cpu[64]; /* the name the tuner's fitted rows go by */
  snprintf(cpu, sizeof cpu, "\n  CPU %s\n", weft__cpu_key());
  if (weft__cpu_key()[0] != '\0') assert_non_null(strstr(out, cpu));
  /* Both ranks share the host: the matrix row of rank 0 reads X then a same-host class. */
  char *row = strstr(out, "\nrank0 ");
  assert_non_null(row);
  char c0[8], c1[8];
  assert_int_equal(sscanf(row, "\nrank0 %7s %7s", c0, c1), 2);
  assert_string_equal(c0, "X");
  assert_true(strcmp(c1, "L3") == 0 || strcmp(c1, "NUMA") == 0 || strcmp(c1, "HOST") == 0);
  assert_non_null(strstr(out, "\nrank1 "));
  assert_non_null(strstr(out, "Legend:"));
  free(out);
}

static void weft_topo_dump_then_load_prints_the_loaded_view(void **state) {
  char *xml = temp_path("dump"), *args, *env;
  int st;
  assert_true(asprintf(&args, "--dump '%s'", xml) > 0);
  char *out = run_tool("", 2, args, 1, &st);
  assert_int_equal(st, 0);
  assert_non_null(strstr(out, "wrote "));
  free(out);
  weft__topo_system sys;
  assert_int_equal(weft__topo_xml_load(xml, &sys), WEFT_SUCCESS);
  assert_int_equal(sys.nranks, 2);
  weft__topo_system_free(&sys);
  assert_true(asprintf(&env, "WEFT_TOPO_FILE='%s'", xml) > 0);
  out = run_tool(env, 2, "", 1, &st);
  assert_int_equal(st, 0);
  assert_non_null(strstr(out, "(WEFT_TOPO_FILE), not detected"));
  free(out);
  out = run_tool(env, 3, "", 0, &st); /* a file of 2 ranks does not fit 3 */
  assert_int_not_equal(st, 0);
  assert_non_null(strstr(out, "describes 2 ranks, the communicator has 3"));
  free(out);
  unlink(xml);
  free(xml);
  free(args);
  free(env);
}

static void weft_topo_probe_on_2_ranks_prints_both_matrices(void **state) {
  int st;
  char *out = run_tool("", 2, "--probe --lat-iters 10 --bw-bytes 256K --bw-iters 2", 1, &st);
  assert_int_equal(st, 0);
  assert_non_null(strstr(out, "Latency (us"));
  assert_non_null(strstr(out, "Bandwidth (GB/s, 262144 bytes"));
  assert_non_null(strstr(out, "Per link class"));
  double l01, bw01;
  char *lat = strstr(out, "Latency (us"), *bw = strstr(out, "Bandwidth (GB/s");
  assert_int_equal(sscanf(strstr(lat, "\nrank0 "), "\nrank0 - %lf", &l01), 1);
  assert_int_equal(sscanf(strstr(bw, "\nrank0 "), "\nrank0 - %lf", &bw01), 1);
  assert_true(l01 > 0 && bw01 > 0);
  free(out);
}
/* ---------------------------------------------------------------------------------- */
/* The communicator's view: ring order, init-time dump and file */

/* Interleaved hosts and NUMA nodes: hosts contiguous in order of their first rank, then NUMA
 * node (unknown last), then lowest CPU. */
static void ring_order_groups_hosts_then_numa_then_core(void **state) {
  weft__topo_summary s[7];
  fake(&s[0], 0, 0xa, "a", 1, 2, "8-9");
  fake(&s[1], 1, 0xb, "b", 0, 0, "0-1");
  fake(&s[2], 2, 0xa, "a", 0, 1, "4-5");
  fake(&s[3], 3, 0xb, "b", -1, -1, "0-15");
  fake(&s[4], 4, 0xa, "a", 0, 0, "0-1");
  fake(&s[5], 5, 0xc, "c", 0, 0, "0-1");
  fake(&s[6], 6, 0xb, "b", 0, 0, "2-3");
  weft__topo_system sys;
  assert_int_equal(weft__topo_merge(s, 7, &sys), WEFT_SUCCESS);
  int ring[7];
  weft__topo_ring_order(&sys, ring);
  static const int want[7] = {4, 2, 0, 1, 6, 3, 5};
  for (int p = 0; p < 7; p++) assert_int_equal(ring[p], want[p]);
  setenv("WEFT_RING_ORDER", "rank", 1);
  weft__topo_ring_order(&sys, ring);
  unsetenv("WEFT_RING_ORDER");
  for (int p = 0; p < 7; p++) assert_int_equal(ring[p], p);
  weft__topo_system_free(&sys);
}

/* 4 ranks of one machine; each checks the communicator's view, then all-reduces. */
typedef struct {
  int nhosts;
  int ring[4];
} view_case;

static int view_body(harness_rank *r) {
  const view_case *vc = r->arg;
  struct weft_comm *c = r->comm;
  if (c->topo == NULL || c->ring == NULL || c->ring_pos == NULL) return harness_fail(r, "no topology on the comm");
  if (c->topo->nhosts != vc->nhosts) harness_fail(r, "%d hosts, expected %d", c->topo->nhosts, vc->nhosts);
  for (int p = 0; p < 4; p++)
    if (c->ring[p] != vc->ring[p]) harness_fail(r, "ring position %d: rank %d, expected %d", p, c->ring[p], vc->ring[p]);
  int same = c->topo->ranks[(r->rank + 2) % 4].host == c->topo->ranks[r->rank].host;
  const char *want_tr = vc->nhosts == 1 || same ? "shm" : "socket";
  const char *got_tr = c->conns[(r->rank + 2) % 4].tr->name;
  if (strcmp(got_tr, want_tr) != 0)
    harness_fail(r, "transport to peer %d: %s, expected %s", (r->rank + 2) % 4, got_tr, want_tr);
  int32_t v = r->rank + 1, sum = 0;
  weft_status_t st = weft_all_reduce(&v, &sum, 1, WEFT_INT32, WEFT_SUM, c, NULL);
  if (st != WEFT_SUCCESS || sum != 10) harness_fail(r, "all_reduce: status %d, sum %d (expected 10)", st, sum);
  return r->failures;
}

/* WEFT_TOPO_DUMP_FILE at init writes the detected view; edited into two hosts (ranks 0, 2
 * and 1, 3) and loaded with WEFT_TOPO_FILE, it makes the ring 0 2 1 3 and puts sockets
 * between the "hosts". */
static void init_dumps_the_view_and_a_topo_file_reshapes_hosts_and_ring(void **state) {
  char *xml = temp_path("init");
  setenv("WEFT_TOPO_DUMP_FILE", xml, 1);
  view_case one = {1, {0, 1, 2, 3}};
  harness_run_simple(4, NULL, view_body, &one);
  unsetenv("WEFT_TOPO_DUMP_FILE");
  weft__topo_system sys;
  assert_int_equal(weft__topo_xml_load(xml, &sys), WEFT_SUCCESS);
  assert_int_equal(sys.nranks, 4);
  assert_int_equal(sys.nhosts, 1);
  weft__topo_host *hosts = realloc(sys.hosts, 2 * sizeof(*hosts));
  assert_non_null(hosts);
  sys.hosts = hosts;
  sys.hosts[1] = sys.hosts[0];
  sys.hosts[1].hash ^= 0x5a5a;
  snprintf(sys.hosts[1].hostname, sizeof(sys.hosts[1].hostname), "other");
  sys.hosts[0].nranks = sys.hosts[1].nranks = 2;
  sys.nhosts = 2;
  sys.ranks[1].host = sys.ranks[3].host = 1;
  sys.ranks[2].local_rank = 1;
  sys.ranks[1].local_rank = 0;
  sys.ranks[3].local_rank = 1;
  assert_int_equal(weft__topo_xml_dump(&sys, xml), WEFT_SUCCESS);
  weft__topo_system_free(&sys);
  setenv("WEFT_TOPO_FILE", xml, 1);
  view_case two = {2, {0, 2, 1, 3}};
  harness_run_simple(4, NULL, view_body, &two);
  unsetenv("WEFT_TOPO_FILE");
  unlink(xml);
  free(xml);
}

/* The progress thread's placement: bound inside the process's CPUs, or nothing done. */
static int place_body(harness_rank *r) {
  cpu_set_t before, after;
  sched_getaffinity(0, sizeof(before), &before);
  int rc = weft__topo_place_thread(r->comm);
  pthread_getaffinity_np(pthread_self(), sizeof(after), &after);
  cpu_set_t both;
  CPU_AND(&both, &before, &after);
  if (CPU_COUNT(&after) == 0 || !CPU_EQUAL(&both, &after))
    harness_fail(r, "place_thread returned %d and left %d CPUs, not inside the process's %d", rc,
                 CPU_COUNT(&after), CPU_COUNT(&before));
  setenv("WEFT_PROGRESS_BIND", "0", 1);
  if (weft__topo_place_thread(r->comm) != -1) harness_fail(r, "WEFT_PROGRESS_BIND=0 still bound the thread");
  unsetenv("WEFT_PROGRESS_BIND");
  if (weft__topo_place_thread(NULL) != -1) harness_fail(r, "place_thread(NULL) did not return -1");
  return r->failures;
}

static void progress_thread_placement_stays_inside_the_ranks_cpus(void **state) {
  harness_run_simple(2, NULL, place_body, NULL);
}


int main(void) {
  const struct CMUnitTest unit[] = {
      cmocka_unit_test(discovery_sees_cores_numa_and_cpus_on_this_machine),
      cmocka_unit_test(sysfs_fallback_sees_the_same_cpu_counts),
      cmocka_unit_test(cpuset_list_form_round_trips),
      cmocka_unit_test(link_classes_of_synthetic_ranks),
      cmocka_unit_test(merge_rejects_a_summary_of_another_build),
      cmocka_unit_test(merge_rejects_a_summary_with_a_bad_device_count_or_unterminated_names),
      cmocka_unit_test(xml_round_trip_gives_the_same_view),
      cmocka_unit_test(xml_load_names_the_line_of_an_error),
      cmocka_unit_test(xml_load_accepts_any_well_formed_xml),
      cmocka_unit_test(ring_order_groups_hosts_then_numa_then_core),
      cmocka_unit_test(init_dumps_the_view_and_a_topo_file_reshapes_hosts_and_ring),
      cmocka_unit_test(progress_thread_placement_stays_inside_the_ranks_cpus),
      cmocka_unit_test(ranks_take_the_nearest_hca_spread_over_a_nodes_hcas),
      cmocka_unit_test(discovery_gives_nics_and_gpus_their_pci_path),
      cmocka_unit_test(xml_keeps_device_paths_cpus_and_nvlinks),
  };
  const struct CMUnitTest tool[] = {
      cmocka_unit_test(weft_topo_on_2_ranks_prints_the_matrix),
      cmocka_unit_test(weft_topo_dump_then_load_prints_the_loaded_view),
      cmocka_unit_test(weft_topo_probe_on_2_ranks_prints_both_matrices),
      cmocka_unit_test(weft_topo_lists_emulated_hcas_and_each_ranks_pick),
      cmocka_unit_test(weft_topo_prints_the_device_matrix_of_a_gpu_box),
  };
  enum { n_unit = sizeof unit / sizeof unit[0], n_tool = sizeof tool / sizeof tool[0] };
  struct CMUnitTest tests[n_unit + n_tool];
  memcpy(tests, unit, sizeof unit);
  int have = builddir() != NULL;
  for (int t = 0; t < n_tool; t++) {
    /* Without the build directory the tool tests pass with a TAP SKIP directive. */
    tests[n_unit + t] = tool[t];
    if (!have) {
      char *name;
      if (asprintf(&name, "%s # SKIP no ./weftrun and ./weft-topo (WEFT_TOP_BUILDDIR)", tool[t].name) < 0) return 1;
      tests[n_unit + t].name = name;
      tests[n_unit + t].test_func = skipped;
    }
  }
  return _cmocka_run_group_tests("test_topo", tests, n_unit + n_tool, NULL, NULL);
}

/* weft-topo: prints the topology a weft job runs on, as `nvidia-smi topo -m` does for GPUs.
 *
 *   weftrun -n 4 weft-topo [--dump FILE] [--probe [--lat-iters N] [--bw-bytes SIZE]
 *                          [--bw-iters N]]
 *
 * A weft program: it joins a communicator from the launcher's environment (weftrun,
 * mpirun, srun, torchrun), every rank discovers its own placement, the views are merged
 * (topo/merge.c), and rank 0 prints one header per host (packages, NUMA nodes, cores, L3
 * caches, NICs and GPUs with their PCI addresses) with the matrix of its devices as
 * nvidia-smi topo -m prints it (PCI links from topo/pci_link.c, NVLinks from NVML through
 * topo/nvlink.c), each GPU's nearest NIC, then the matrix of link classes between ranks with
 * each rank's NIC, NUMA node, L3 and CPU set, then a legend.
 *
 * --dump FILE (or WEFT_TOPO_DUMP_FILE) writes the view as XML; WEFT_TOPO_FILE loads a
 * view (e.g. a corrected dump) instead of the detected one, and it is printed as loaded.
 *
 * --probe measures every pair, one pair at a time while the other ranks wait at a barrier:
 * latency is half the median round trip of N 8-byte ping-pongs (after 2 warm-ups);
 * bandwidth is SIZE bytes sent one way and a 1-byte acknowledgement, median of M
 * transfers (after one warm-up), counted as SIZE / time in GB/s (1e9 B/s). Both
 * directions are measured, each by its sender. A pair is marked '*' when its bandwidth
 * is below half the median bandwidth of the pairs of its link class, or its latency above
 * twice the class median: a slow link or host stands out from its peers. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/env.h"
#include "topo/topo.h"

typedef struct {
  const char *dump;
  int probe;
  int lat_iters;
  size_t bw_bytes;
  int bw_iters;
} options;

static void usage(FILE *f) {
  fputs("usage: weft-topo [--dump FILE] [--probe [--lat-iters N] [--bw-bytes SIZE] [--bw-iters N]]\n"
        "  run under weftrun, mpirun, srun or torchrun, e.g. weftrun -n 4 weft-topo\n"
        "  --dump FILE      write the topology as XML (also WEFT_TOPO_DUMP_FILE)\n"
        "  --probe          measure latency and bandwidth between every pair of ranks\n"
        "  --lat-iters N    8-byte round trips per pair (default 50)\n"
        "  --bw-bytes SIZE  bytes per bandwidth transfer, K/M/G suffixes (default 4M)\n"
        "  --bw-iters N     bandwidth transfers per direction (default 3)\n"
        "  WEFT_TOPO_FILE=FILE loads a (corrected) XML view instead of detecting\n", f);
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  size_t mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1u << 10;
  else if (*end == 'M' || *end == 'm') mult = 1u << 20;
  else if (*end == 'G' || *end == 'g') mult = 1u << 30;
  else if (*end != '\0') return 0;
  if (end == s || v <= 0) return 0;
  return (size_t)(v * (double)mult);
}

/* 0, or 2 after printing usage. */
static int parse_args(int argc, char **argv, options *o) {
  static const struct option longs[] = {
      {"dump", required_argument, NULL, 'd'},     {"probe", no_argument, NULL, 'p'},
      {"lat-iters", required_argument, NULL, 'l'}, {"bw-bytes", required_argument, NULL, 'b'},
      {"bw-iters", required_argument, NULL, 'i'}, {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  *o = (options){weft__env_str("WEFT_TOPO_DUMP_FILE", NULL), 0, 50, 4u << 20, 3};
  int c;
  argv[0] = (char *)"weft-topo"; /* getopt's messages: not the libtool ".libs/" path */
  while ((c = getopt_long(argc, argv, "d:pl:b:i:h", longs, NULL)) != -1) {
    switch (c) {
      case 'd': o->dump = optarg; break;
      case 'p': o->probe = 1; break;
      case 'l': o->lat_iters = atoi(optarg); break;
      case 'b': o->bw_bytes = parse_size(optarg); break;
      case 'i': o->bw_iters = atoi(optarg); break;
      case 'h': usage(stdout); exit(0);
      default: usage(stderr); return 2;
    }
  }
  if (optind != argc || o->lat_iters < 1 || o->bw_iters < 1 || o->bw_bytes == 0) {
    usage(stderr);
    return 2;
  }
  return 0;
}

/* ---------------------------------------------------------------------------------- */
/* Printing the view (rank 0) */

static const char *speed_str(int32_t mbps, char *buf, size_t len) {
  if (mbps <= 0) snprintf(buf, len, "?");
  else if (mbps >= 1000) snprintf(buf, len, "%gG", mbps / 1000.0);
  else snprintf(buf, len, "%dM", mbps);
  return buf;
}

static const char *idx_str(int32_t v, char *buf, size_t len) {
  if (v < 0) snprintf(buf, len, "-");
  else snprintf(buf, len, "%d", v);
  return buf;
}

/* "0-3,6": the ranks of host h. */
static void host_ranks(const weft__topo_system *sys, int h, char *buf, size_t len) {
  uint8_t set[WEFT__TOPO_MAX_CPUS / 8] = {0};
  int beyond = 0;
  for (int r = 0; r < sys->nranks; r++) {
    if (sys->ranks[r].host != h) continue;
    if (r < WEFT__TOPO_MAX_CPUS) set[r / 8] |= 1u << (r % 8);
    else beyond++;
  }
  weft__topo_cpuset_str(set, buf, len); /* the same list form fits ranks */
  if (beyond) snprintf(buf + strlen(buf), len - strlen(buf), " and %d more", beyond);
}

static const char *plural(int n, const char *one, const char *many) { return n == 1 ? one : many; }

/* ---- the host's devices as nvidia-smi topo -m shows them ---- */

static int is_gpu(const weft__topo_device *d) { return strcmp(d->kind, "gpu") == 0; }

/* The host's devices in matrix order, GPUs then NICs and HCAs, with labels GPU0.., NIC0... */
static int device_order(const weft__topo_host *host, int *idx, char (*label)[16]) {
  int n = 0, gpus = 0, nics = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < host->ndevices; i++) {
      if (is_gpu(&host->devices[i]) != (pass == 0)) continue;
      snprintf(label[n], sizeof(label[n]), pass == 0 ? "GPU%d" : "NIC%d", pass == 0 ? gpus++ : nics++);
      idx[n++] = i;
    }
  return n;
}

/* The NIC (index into order) closest to GPU g: the nearest link class, then the faster. */
static int closest_nic(const weft__topo_host *host, const int *idx, int n, int g, weft__pci_link *link) {
  int best = -1, nv;
  for (int k = 0; k < n; k++) {
    const weft__topo_device *d = &host->devices[idx[k]];
    if (is_gpu(d)) continue;
    weft__pci_link l = weft__topo_device_link(host, idx[g], idx[k], &nv);
    if (best < 0 || l < *link || (l == *link && d->speed_mbps > host->devices[idx[best]].speed_mbps)) {
      best = k;
      *link = l;
    }
  }
  return best;
}

static void print_nvlink_line(const weft__topo_host *host) {
  int pairs = 0;
  for (int i = 0; i < host->ndevices; i++)
    for (int j = i + 1; j < host->ndevices; j++) pairs += host->nvlinks[i][j] > 0;
  if (!host->nvlink_known) printf("  NVLink: unknown (no NVML)\n");
  else if (pairs == 0) printf("  NVLink: none between these GPUs (NVML)\n");
  else printf("  NVLink: %d GPU %s linked (NVML)\n", pairs, plural(pairs, "pair", "pairs"));
}

static void print_affinity(const weft__topo_host *host, const int *idx, char (*label)[16], int n) {
  int first = 1;
  for (int g = 0; g < n; g++) {
    if (!is_gpu(&host->devices[idx[g]])) continue;
    weft__pci_link l = WEFT__PCI_UNKNOWN;
    int k = closest_nic(host, idx, n, g, &l);
    printf("%s%s -> ", first ? "  GPU-NIC affinity: " : ", ", label[g]);
    if (k < 0) printf("none");
    else printf("%s (%s, %s)", label[k], host->devices[idx[k]].name[0] ? host->devices[idx[k]].name : "?",
                weft__topo_pci_link_name(l));
    first = 0;
  }
  if (!first) printf("\n");
}

/* Cells from topo/pci_link.c and the NVLink table; CPU and NUMA affinity per device. */
static void print_devices(const weft__topo_host *host) {
  int idx[WEFT__TOPO_MAX_DEVICES], gpus = 0;
  char label[WEFT__TOPO_MAX_DEVICES][16];
  int n = device_order(host, idx, label);
  if (n == 0) return;
  printf("\n  %-8s", "");
  for (int k = 0; k < n; k++) printf("%-7s", label[k]);
  printf("%-16s %s\n", "CPU Affinity", "NUMA Affinity");
  for (int a = 0; a < n; a++) {
    const weft__topo_device *d = &host->devices[idx[a]];
    char cell[16], cpus[4096], numa[16];
    gpus += is_gpu(d);
    printf("  %-8s", label[a]);
    for (int b = 0; b < n; b++) {
      int nv;
      weft__pci_link l = weft__topo_device_link(host, idx[a], idx[b], &nv);
      if (l == WEFT__PCI_NVLINK) snprintf(cell, sizeof(cell), "NV%d", nv);
      else snprintf(cell, sizeof(cell), "%s", weft__topo_pci_link_name(l));
      printf("%-7s", cell);
    }
    weft__topo_cpuset_str(d->cpus, cpus, sizeof(cpus));
    printf("%-16s %s\n", cpus[0] ? cpus : "-", idx_str(d->numa, numa, sizeof(numa)));
  }
  printf("\n");
  for (int k = 0, first = 1; k < n; k++) {
    if (is_gpu(&host->devices[idx[k]])) continue;
    printf("%s%s = %s", first ? "  " : ", ", label[k], host->devices[idx[k]].name[0] ? host->devices[idx[k]].name : "?");
    first = 0;
  }
  if (n > gpus) printf("\n");
  if (gpus == 0) return;
  print_affinity(host, idx, label, n);
  print_nvlink_line(host);
}

static void print_host(const weft__topo_system *sys, int h) {
  const weft__topo_host *host = &sys->hosts[h];
  char ranks[512], sp[16], numa[16];
  host_ranks(sys, h, ranks, sizeof(ranks));
  printf("Host %d: %s (%d %s: %s; discovery: %s)\n", h, host->hostname, host->nranks,
         plural(host->nranks, "rank", "ranks"), ranks, host->discovery);
  printf("  %d %s, %d NUMA %s, %d %s, %d %s, %d L3 %s\n", host->packages,
         plural(host->packages, "package", "packages"), host->numa_nodes,
         plural(host->numa_nodes, "node", "nodes"), host->cores, plural(host->cores, "core", "cores"),
         host->pus, plural(host->pus, "PU", "PUs"), host->l3_caches,
         plural(host->l3_caches, "cache", "caches"));
  if (host->cpu[0] != '\0') /* the name the tuner's fitted rows go by (weft-tune) */
    printf("  CPU %s\n", host->cpu);
  if (strcmp(host->discovery, "sysfs/no-hwloc") == 0)
    printf("  (hwloc not available in this build: read from /sys, GPUs only by PCI class)\n");
  else if (strncmp(host->discovery, "sysfs", 5) == 0)
    printf("  (hwloc disabled (WEFT_TOPO_HWLOC=0) or failed: read from /sys)\n");
  int gpus = 0;
  for (int i = 0; i < host->ndevices; i++) {
    const weft__topo_device *d = &host->devices[i];
    gpus += strcmp(d->kind, "gpu") == 0;
    printf("  %-4s %-10s PCI %-13s NUMA %-3s speed %s\n", strcmp(d->kind, "gpu") == 0 ? "GPU"
           : strcmp(d->kind, "ib") == 0 ? "IB" : strcmp(d->kind, "roce") == 0 ? "RoCE" : "NIC",
           d->name[0] ? d->name : "(no driver)", d->pci[0] ? d->pci : "-", idx_str(d->numa, numa, sizeof(numa)),
           strcmp(d->kind, "gpu") == 0 ? "-" : speed_str(d->speed_mbps, sp, sizeof(sp)));
    if (d->path[0] != '\0') printf("       PCI path %s\n", d->path);
  }
  if (gpus == 0) printf("  GPU  none\n");
  print_devices(host);
}

static void print_matrix(const weft__topo_system *sys) {
  int w = snprintf(NULL, 0, "rank%d", sys->nranks - 1) + 2;
  if (w < 6) w = 6;
  printf("\n%-*s", w, "");
  for (int b = 0; b < sys->nranks; b++) {
    char label[24];
    snprintf(label, sizeof(label), "rank%d", b);
    printf("%-*s", w, label);
  }
  printf("%-10s %-6s %-5s %-4s %-4s %s\n", "NIC", "Speed", "NUMA", "L3", "Host", "CPUs");
  for (int a = 0; a < sys->nranks; a++) {
    const weft__topo_rank *r = &sys->ranks[a];
    char label[24], cpus[4096], sp[16], numa[16], l3[16];
    snprintf(label, sizeof(label), "rank%d", a);
    printf("%-*s", w, label);
    for (int b = 0; b < sys->nranks; b++) printf("%-*s", w, weft__topo_link_name(weft__topo_link(sys, a, b)));
    weft__topo_cpuset_str(r->cpuset, cpus, sizeof(cpus));
    printf("%-10s %-6s %-5s %-4s %-4d %s\n", r->nic[0] ? r->nic : "none",
           speed_str(r->nic_speed_mbps, sp, sizeof(sp)), idx_str(r->numa, numa, sizeof(numa)),
           idx_str(r->core_group, l3, sizeof(l3)), r->host, cpus);
  }
}

/* Placement worth a second look: a NIC on another NUMA node than its rank. */
static void print_notes(const weft__topo_system *sys) {
  for (int a = 0; a < sys->nranks; a++) {
    const weft__topo_rank *r = &sys->ranks[a];
    if (r->numa >= 0 && r->nic_numa >= 0 && r->numa != r->nic_numa)
      printf("note: rank %d runs on NUMA node %d but its NIC %s hangs off node %d\n", a, r->numa,
             r->nic, r->nic_numa);
  }
}

static void print_legend(void) {
  puts("\nLegend:\n"
       "  X    = self\n"
       "  L3   = same host, both ranks' CPUs inside one L3 cache (a core group)\n"
       "  NUMA = same host and NUMA node, not sharing an L3 cache\n"
       "  HOST = same host, different NUMA nodes (or a rank whose CPUs span several)\n"
       "  NET  = different hosts: traffic crosses the network\n"
       "  IB, RoCE = RDMA HCAs the ib transport may use (WEFT_IB_HCA applied), with the PCI\n"
       "         path and NUMA node it reads from ibdev_path/device; speed = active speed x width\n"
       "  NIC  = the interface the rank would use (WEFT_SOCKET_IFNAME, else the first\n"
       "         non-loopback interface that is up); Speed from /sys/class/net/NIC/speed,\n"
       "         ? when unknown (virtual NICs)\n"
       "  NUMA, L3 = the NUMA node and L3 cache holding all the rank's CPUs, - when they span\n"
       "         several; CPUs = the CPUs the rank may run on (its affinity, OS numbering)\n"
       "Device links (per host, GPUs then NICs and HCAs, as nvidia-smi topo -m names them):\n"
       "  X    = self\n"
       "  NV#  = a bonded set of # NVLinks (counted by NVML)\n"
       "  PIX  = at most one PCIe bridge (a PCIe switch) between them\n"
       "  PXB  = several PCIe bridges, without the PCIe host bridge\n"
       "  PHB  = through a PCIe host bridge (the CPU's root complex)\n"
       "  NODE = across PCIe host bridges within one NUMA node\n"
       "  SYS  = across NUMA nodes (the SMP interconnect between CPU sockets)\n"
       "  ?    = unknown: no PCI path to compare\n"
       "  CPU Affinity = the CPUs local to the device (sysfs local_cpulist); NUMA Affinity =\n"
       "         its NUMA node; GPU-NIC affinity = the NIC nearest each GPU (closest link, then\n"
       "         the faster NIC)");
}

/* Which HCA each rank's ib transport takes (topo/hca.c), when any host has one. */
static void print_hcas(const weft__topo_system *sys) {
  int any = 0;
  for (int r = 0; r < sys->nranks && !any; r++) any = weft__topo_pick_hca(sys, r) >= 0;
  if (!any) return;
  printf("\nHCA per rank (the ib transport's: on the rank's NUMA node, spread over its ranks):\n");
  for (int r = 0; r < sys->nranks; r++) {
    int i = weft__topo_pick_hca(sys, r);
    const weft__topo_device *d = i >= 0 ? &sys->hosts[sys->ranks[r].host].devices[i] : NULL;
    char numa[16];
    if (d == NULL) printf("  rank%-4d none\n", r);
    else printf("  rank%-4d %-10s %-4s NUMA %s\n", r, d->name, strcmp(d->kind, "ib") == 0 ? "IB" : "RoCE",
                idx_str(d->numa, numa, sizeof(numa)));
  }
}

/* The ring order the communicator derives from this view (topo/comm_topo.c). */
static void print_ring(const weft__topo_system *sys) {
  int *ring = malloc((size_t)sys->nranks * sizeof(int));
  if (ring == NULL) return;
  weft__topo_ring_order(sys, ring);
  printf("\nRing order (ring and chain algorithms; | between hosts):");
  for (int p = 0; p < sys->nranks; p++) {
    int cross = p > 0 && sys->ranks[ring[p]].host != sys->ranks[ring[p - 1]].host;
    printf("%s %d", cross ? " |" : "", ring[p]);
  }
  printf("\n");
  free(ring);
}

static void print_system(const weft__topo_system *sys) {
  if (strcmp(sys->source, "detected") == 0)
    printf("weft-topo: %d %s on %d %s (detected)\n\n", sys->nranks, plural(sys->nranks, "rank", "ranks"),
           sys->nhosts, plural(sys->nhosts, "host", "hosts"));
  else
    printf("weft-topo: %d %s on %d %s, loaded from %s (WEFT_TOPO_FILE), not detected\n\n",
           sys->nranks, plural(sys->nranks, "rank", "ranks"), sys->nhosts,
           plural(sys->nhosts, "host", "hosts"), sys->source);
  for (int h = 0; h < sys->nhosts; h++) print_host(sys, h);
  print_matrix(sys);
  print_hcas(sys);
  print_ring(sys);
  print_notes(sys);
  print_legend();
}

/* ---------------------------------------------------------------------------------- */
/* --probe */

typedef struct {
  weft_comm_t comm;
  const options *o;
  char *sbuf, *rbuf;
} prober;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The initiator's side toward peer: latency (us) and bandwidth (GB/s). */
static weft_status_t measure(prober *p, int peer, double *lat_us, double *bw_gbs) {
  int n = p->o->lat_iters > p->o->bw_iters ? p->o->lat_iters : p->o->bw_iters;
  double *samples = calloc((size_t)n, sizeof(double));
  if (samples == NULL) return WEFT_ERR_NO_MEMORY;
  weft_status_t st = WEFT_SUCCESS;
  for (int i = -2; i < p->o->lat_iters && st == WEFT_SUCCESS; i++) {
    uint64_t t0 = weft__now_ns();
    st = weft_send(p->sbuf, 8, WEFT_UINT8, peer, p->comm, NULL);
    if (st == WEFT_SUCCESS) st = weft_recv(p->rbuf, 8, WEFT_UINT8, peer, p->comm, NULL);
    if (i >= 0) samples[i] = (double)(weft__now_ns() - t0) / 2e3;
  }
  if (st == WEFT_SUCCESS) *lat_us = median(samples, p->o->lat_iters);
  for (int i = -1; i < p->o->bw_iters && st == WEFT_SUCCESS; i++) {
    uint64_t t0 = weft__now_ns();
    st = weft_send(p->sbuf, p->o->bw_bytes, WEFT_UINT8, peer, p->comm, NULL);
    if (st == WEFT_SUCCESS) st = weft_recv(p->rbuf, 1, WEFT_UINT8, peer, p->comm, NULL);
    if (i >= 0) samples[i] = (double)p->o->bw_bytes / (double)(weft__now_ns() - t0);
  }
  if (st == WEFT_SUCCESS) *bw_gbs = median(samples, p->o->bw_iters);
  free(samples);
  return st;
}

/* The responder's side: mirrors measure(). */
static weft_status_t respond(prober *p, int peer) {
  weft_status_t st = WEFT_SUCCESS;
  for (int i = -2; i < p->o->lat_iters && st == WEFT_SUCCESS; i++) {
    st = weft_recv(p->rbuf, 8, WEFT_UINT8, peer, p->comm, NULL);
    if (st == WEFT_SUCCESS) st = weft_send(p->sbuf, 8, WEFT_UINT8, peer, p->comm, NULL);
  }
  for (int i = -1; i < p->o->bw_iters && st == WEFT_SUCCESS; i++) {
    st = weft_recv(p->rbuf, p->o->bw_bytes, WEFT_UINT8, peer, p->comm, NULL);
    if (st == WEFT_SUCCESS) st = weft_send(p->sbuf, 1, WEFT_UINT8, peer, p->comm, NULL);
  }
  return st;
}

/* Every pair in turn; row[0..n) latency and row[n..2n) bandwidth this rank measured as sender. */
static weft_status_t probe_pairs(prober *p, int rank, int n, double *row) {
  for (int i = 0; i < n; i++) {
    for (int j = i + 1; j < n; j++) {
      weft_status_t st = weft_barrier(p->comm, NULL);
      if (st == WEFT_SUCCESS && rank == i) {
        st = measure(p, j, &row[j], &row[n + j]);
        if (st == WEFT_SUCCESS) st = respond(p, j);
      } else if (st == WEFT_SUCCESS && rank == j) {
        st = respond(p, i);
        if (st == WEFT_SUCCESS) st = measure(p, i, &row[i], &row[n + i]);
      }
      if (st != WEFT_SUCCESS) return st;
    }
  }
  return weft_barrier(p->comm, NULL);
}

/* The class medians of m[a*n+b] over pairs a != b. */
static void class_medians(const weft__topo_system *sys, const double *m, double *med, int *count) {
  int n = sys->nranks;
  double *v = malloc(sizeof(double) * (size_t)n * (size_t)n + 1);
  for (int c = 0; c < WEFT__NUM_LINKS; c++) {
    int k = 0;
    for (int a = 0; a < n; a++)
      for (int b = 0; b < n && v != NULL; b++)
        if (a != b && (int)weft__topo_link(sys, a, b) == c) v[k++] = m[a * n + b];
    count[c] = k;
    med[c] = k ? median(v, k) : NAN;
  }
  free(v);
}

/* Prints matrix m (n x n) with marks where mark() says so. worse_high: larger is worse. */
static void print_probe_matrix(const weft__topo_system *sys, const char *title, const double *m,
                               const double *med, int worse_high) {
  int n = sys->nranks, marked = 0;
  printf("\n%s\n%-8s", title, "");
  for (int b = 0; b < n; b++) printf("%9s%-2d", "rank", b);
  printf("\n");
  for (int a = 0; a < n; a++) {
    printf("rank%-4d", a);
    for (int b = 0; b < n; b++) {
      if (a == b) { printf("%9s  ", "-"); continue; }
      double x = m[a * n + b], ref = med[weft__topo_link(sys, a, b)];
      int bad = worse_high ? x > 2 * ref : x < 0.5 * ref;
      marked += bad;
      printf("%9.2f%-2s", x, bad ? "*" : "");
    }
    printf("\n");
  }
  if (marked) printf("%d %s marked '*'\n", marked, plural(marked, "pair", "pairs"));
}

static void print_probe(const weft__topo_system *sys, const options *o, const double *rows) {
  int n = sys->nranks;
  double *lat = malloc(sizeof(double) * (size_t)n * (size_t)n);
  double *bw = malloc(sizeof(double) * (size_t)n * (size_t)n);
  if (lat == NULL || bw == NULL) { free(lat); free(bw); return; }
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++) {
      lat[a * n + b] = rows[(size_t)a * 2 * n + b];
      bw[a * n + b] = rows[(size_t)a * 2 * n + n + b];
    }
  double lmed[WEFT__NUM_LINKS], bmed[WEFT__NUM_LINKS];
  int cnt[WEFT__NUM_LINKS];
  class_medians(sys, lat, lmed, cnt);
  class_medians(sys, bw, bmed, cnt);
  char title[160];
  snprintf(title, sizeof(title), "Latency (us, one way: half the median of %d 8-byte round trips; row = sender)",
           o->lat_iters);
  print_probe_matrix(sys, title, lat, lmed, 1);
  snprintf(title, sizeof(title), "Bandwidth (GB/s, %zu bytes one way, median of %d; row = sender)",
           o->bw_bytes, o->bw_iters);
  print_probe_matrix(sys, title, bw, bmed, 0);
  printf("\nPer link class (median over ordered pairs):\n");
  for (int c = WEFT__LINK_L3; c < WEFT__NUM_LINKS; c++)
    if (cnt[c]) printf("  %-4s %3d pairs  latency %8.2f us  bandwidth %8.2f GB/s\n",
                       weft__topo_link_name((weft__link_class)c), cnt[c], lmed[c], bmed[c]);
  puts("'*' = bandwidth below half the median of the pair's link class, or latency above twice\n"
       "      it: that link or host is much slower than its peers of the same class.");
  free(lat);
  free(bw);
}

static weft_status_t run_probe(weft_comm_t comm, const weft__topo_system *sys, const options *o) {
  int rank = comm->rank, n = comm->nranks;
  if (n < 2) {
    if (rank == 0) printf("\n--probe: one rank, no pair to measure\n");
    return WEFT_SUCCESS;
  }
  prober p = {comm, o, malloc(o->bw_bytes), malloc(o->bw_bytes)};
  double *row = calloc((size_t)2 * n, sizeof(double));
  double *rows = calloc((size_t)2 * n * n, sizeof(double));
  weft_status_t st = WEFT_ERR_NO_MEMORY;
  if (p.sbuf && p.rbuf && row && rows) {
    memset(p.sbuf, 1, o->bw_bytes); /* touch the pages before timing */
    memset(p.rbuf, 0, o->bw_bytes);
    st = probe_pairs(&p, rank, n, row);
    if (st == WEFT_SUCCESS) st = weft_all_gather(row, rows, (size_t)2 * n, WEFT_FLOAT64, comm, NULL);
    if (st == WEFT_SUCCESS && rank == 0) print_probe(sys, o, rows);
  }
  free(p.sbuf);
  free(p.rbuf);
  free(row);
  free(rows);
  return st;
}

int main(int argc, char **argv) {
  options o;
  if (parse_args(argc, argv, &o) != 0) return 2;
  weft_comm_t comm;
  weft_status_t st = weft_comm_init_from_env(&comm, NULL);
  if (st != WEFT_SUCCESS) {
    fprintf(stderr, "weft-topo: cannot join the job: %s\n", weft_get_last_error(NULL));
    return 1;
  }
  weft__topo_system sys;
  int dump_failed = 0;
  st = weft__topo_build(comm, &sys);
  if (st == WEFT_SUCCESS && comm->rank == 0) {
    print_system(&sys);
    if (o.dump != NULL && weft__topo_xml_dump(&sys, o.dump) == WEFT_SUCCESS) {
      printf("\nwrote %s (load it with WEFT_TOPO_FILE=%s)\n", o.dump, o.dump);
    } else if (o.dump != NULL) { /* the other ranks go on probing: report, exit 1 at the end */
      fprintf(stderr, "weft-topo: %s\n", weft_get_last_error(NULL));
      dump_failed = 1;
    }
    fflush(stdout);
  }
  if (st == WEFT_SUCCESS && o.probe) st = run_probe(comm, &sys, &o);
  fflush(stdout);
  if (st != WEFT_SUCCESS)
    fprintf(stderr, "weft-topo: %s\n", weft_get_last_error(NULL));
  weft__topo_system_free(&sys);
  weft_comm_destroy(comm);
  return st == WEFT_SUCCESS && !dump_failed ? 0 : 1;
}

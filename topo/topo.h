/* topo.h: weft's view of the machines a communicator runs on (internal API of topo/).
 *
 * Each rank discovers its own host and placement (weft__topo_discover: hwloc when built
 * with it, else sysfs and sched_getaffinity) into a fixed-size weft__topo_summary; the
 * summaries are all-gathered as bytes and merged into one weft__topo_system: hosts, ranks
 * per host, NUMA node, core group (shared L3), CPU set and the NIC of every rank. The
 * system view can be written to and read from a small XML file (topo/xml.c) so a user can
 * inspect or correct what was detected (WEFT_TOPO_DUMP_FILE, WEFT_TOPO_FILE).
 * weft-topo (topo/weft_topo.c) prints it. The communicator builds it at init from the
 * bootstrap all-gather (topo/comm_topo.c) and keeps it as comm->topo: it decides the
 * transport per pair, the ring order, the NIC of the socket transport and the CPUs of the
 * progress thread. */
#ifndef WEFT_TOPO_H
#define WEFT_TOPO_H
#include <stddef.h>
#include <stdint.h>
#include "weft.h"
#include "lib/sockutil.h"

struct weft_comm;

#define WEFT__TOPO_MAX_CPUS 1024     /* CPU ids (OS numbering) a cpuset can hold */
#define WEFT__TOPO_MAX_DEVICES 8     /* NICs and GPUs listed per host */
#define WEFT__TOPO_NAME 64

/* A PCI device of interest: a NIC or a GPU. */
typedef struct {
  char kind[8];                 /* "nic", "ib" (InfiniBand HCA; OpenFabrics before verbs
                                   discovery), "roce" (HCA on Ethernet), "gpu" */
  char name[32];                /* "eth0", "mlx5_0", "cuda0", or "" for a GPU without driver */
  char pci[16];                 /* "0000:00:03.0", "" when not on PCI (virtual) */
  int32_t numa;                 /* NUMA node it hangs off, -1 unknown */
  int32_t speed_mbps;           /* NICs: /sys/class/net/IF/speed; HCAs: the first active port's
                                   speed x width; -1 unknown or virtual */
  char path[128];               /* the sysfs directory of the PCI function, i.e. the realpath of
                                   /sys/bus/pci/devices/BDF: the chain of bridges from the root
                                   complex, "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
                                   (NCCL's PCI path); "" unknown, not on PCI, or longer */
  uint8_t cpus[WEFT__TOPO_MAX_CPUS / 8]; /* CPUs local to it (sysfs local_cpulist), the GPU
                                   "CPU Affinity" of nvidia-smi topo -m; empty when unknown */
} weft__topo_device;

/* What one host looks like; the same for every rank of the host. */
typedef struct {
  uint64_t hash;                /* weft__host_hash: equal for ranks that can share memory */
  char hostname[WEFT__TOPO_NAME];
  char discovery[16];           /* "hwloc 2.9.0" or "sysfs" */
  char cpu[32];                 /* weft__cpu_key (lib/cpu_key.h): the tuner's fitted rows */
  int32_t packages, numa_nodes, cores, pus, l3_caches;
  int32_t ndevices;
  weft__topo_device devices[WEFT__TOPO_MAX_DEVICES];
  uint8_t nvlinks[WEFT__TOPO_MAX_DEVICES][WEFT__TOPO_MAX_DEVICES]; /* [i][j]: NVLinks between
                                   GPUs devices[i] and devices[j] (symmetric; topo/nvlink.c) */
  int32_t nranks;               /* ranks on this host (filled by the merge) */
  int32_t nvlink_known;         /* 1: nvlinks comes from NVML; 0: unknown (no NVML, no GPU, or
                                   not asked: communicator init does not load NVML). Also keeps
                                   the struct free of padding (compared with memcmp) */
} weft__topo_host;

/* The host is all-gathered as bytes and compared with memcmp: no padding anywhere. */
_Static_assert(sizeof(weft__topo_device) == 8 + 32 + 16 + 4 + 4 + 128 + WEFT__TOPO_MAX_CPUS / 8,
               "weft__topo_device has padding");
_Static_assert(sizeof(weft__topo_host) == offsetof(weft__topo_host, nvlink_known) + sizeof(int32_t) &&
               offsetof(weft__topo_host, nvlinks) ==
                 offsetof(weft__topo_host, devices) + sizeof(weft__topo_device) * WEFT__TOPO_MAX_DEVICES,
               "weft__topo_host has padding");

/* Where one rank runs. */
typedef struct {
  int32_t host;                 /* index into weft__topo_system.hosts (filled by the merge) */
  int32_t local_rank;           /* index among the ranks of its host (merge) */
  int32_t numa;                 /* NUMA node holding all its CPUs; -1 spans several / unknown */
  int32_t core_group;           /* index of the L3 holding all its CPUs; -1 spans / unknown */
  int32_t pid;
  int32_t nic_speed_mbps;       /* -1 unknown (virtual NICs) */
  int32_t nic_numa;             /* NUMA node of the NIC, -1 unknown */
  char nic[32];                 /* interface it would use (weft__sockaddr_pick_local) */
  uint8_t cpuset[WEFT__TOPO_MAX_CPUS / 8]; /* bit c: may run on CPU c */
} weft__topo_rank;

/* One rank's discovery, all-gathered as WEFT__TOPO_SUMMARY_BYTES uint8 elements. */
typedef struct {
  uint32_t magic;               /* WEFT__TOPO_MAGIC: catches ranks built from another weft */
  int32_t rank;
  weft__topo_host host;
  weft__topo_rank self;
} weft__topo_summary;
#define WEFT__TOPO_MAGIC 0x746f706fu /* "topo" */
#define WEFT__TOPO_SUMMARY_BYTES sizeof(weft__topo_summary)

/* The merged view of all ranks. */
typedef struct weft__topo_system {
  int nranks;
  int nhosts;
  weft__topo_host *hosts;       /* [nhosts], in order of their first rank */
  weft__topo_rank *ranks;       /* [nranks] */
  char source[256];             /* "detected" or the file it was loaded from */
} weft__topo_system;

/* Link classes between two ranks, closest first. */
typedef enum {
  WEFT__LINK_SELF = 0,
  WEFT__LINK_L3,                /* same host, both inside the same L3 cache (core group) */
  WEFT__LINK_NUMA,              /* same host, same NUMA node */
  WEFT__LINK_HOST,              /* same host, different (or spanning) NUMA nodes */
  WEFT__LINK_NET,               /* different hosts */
  WEFT__NUM_LINKS
} weft__link_class;

/* Fills *out with this process's view: host, CPU set, NUMA node, core group, NIC. Uses
 * hwloc unless built without it or WEFT_TOPO_HWLOC=0; never fails (unknowns are -1). */
void weft__topo_discover(weft__topo_summary *out);
/* The hwloc part (topo/discover_hwloc.c): host counts, devices, numa and core group of the
 * cpuset already in out->self. Returns 0, or -1 when hwloc failed (sysfs is used then). */
int weft__topo_discover_hwloc(weft__topo_summary *out);
/* The fallback from /sys (topo/discover_sysfs.c); same contract. */
int weft__topo_discover_sysfs(weft__topo_summary *out);
/* Helpers of the back ends (discover.c): /sys/class/net/IF/speed in Mb/s (-1 unknown), and
 * adding a device to the host's list (one entry per kind and PCI address: a second name
 * for the same GPU, e.g. nvml0 beside cuda0, is dropped; a full list drops the rest). */
int32_t weft__topo_nic_speed(const char *ifname);
void weft__topo_add_device(weft__topo_host *host, const char *kind, const char *name,
                           const char *pci, int32_t numa);
/* The realpath of /sys/bus/pci/devices/PCI into path ("" when unknown or longer than len)
 * and its local_cpulist into cpus (empty when unknown). add_device calls it for NICs and
 * GPUs; the ib transport fills its HCAs' paths itself. */
void weft__topo_pci_sysfs(const char *pci, char *path, size_t len, uint8_t *cpus);

/* NVLink between the host's GPUs (topo/nvlink.c): at run time through NVML
 * (dlopen("libnvidia-ml.so.1"), never a build dependency; WEFT_NVML_LIBRARY names another
 * file, WEFT_TOPO_NVML=0 skips it). Fills host->nvlinks and sets nvlink_known = 1 when NVML
 * answered; leaves both 0 without NVML or GPUs. Called by weft__topo_discover only: loading
 * NVML costs tens of milliseconds, too much for communicator init. */
void weft__topo_discover_nvlink(weft__topo_host *host);
/* The NVML calls nvlink.c makes, as a table so tests can feed it a fake GPU box. Each
 * returns 0 (NVML_SUCCESS) or an NVML error code. */
typedef struct {
  int (*handle_by_pci)(const char *pci, void **dev);
  int (*link_active)(void *dev, unsigned link, int *active);
  int (*link_remote_pci)(void *dev, unsigned link, char *bus_id, size_t len); /* NVML's busId */
} weft__nvml_calls;
/* The counting itself: for each GPU of host, links 0..17 that are active; a link whose far
 * end is another GPU of the host counts for that pair, any other far end (an NVSwitch)
 * counts as a switch link, and two GPUs with switch links are joined by the fewer of the
 * two counts (an HGX board's NV18). */
void weft__topo_count_nvlinks(weft__topo_host *host, const weft__nvml_calls *nvml);

/* ---- links between the devices of one host, as nvidia-smi topo -m names them
 * (topo/pci_link.c) ---- */
typedef enum {
  WEFT__PCI_SELF = 0,           /* X    the device itself */
  WEFT__PCI_NVLINK,             /* NV#  a bonded set of # NVLinks (GPU pairs, from NVML) */
  WEFT__PCI_PIX,                /* PIX  at most one PCIe bridge (a switch) between them */
  WEFT__PCI_PXB,                /* PXB  several PCIe bridges, no host bridge */
  WEFT__PCI_PHB,                /* PHB  through a PCIe host bridge (one root complex) */
  WEFT__PCI_NODE,               /* NODE across host bridges within one NUMA node */
  WEFT__PCI_SYS,                /* SYS  across NUMA nodes (the SMP interconnect) */
  WEFT__PCI_UNKNOWN,            /* ?    no PCI path to tell */
  WEFT__NUM_PCI_LINKS
} weft__pci_link;
/* The link between two PCI functions from their sysfs paths (the path field above) and
 * NUMA nodes (-1 unknown). Pure: reads nothing. */
weft__pci_link weft__topo_pci_link(const char *path_a, int32_t numa_a, const char *path_b, int32_t numa_b);
/* Devices i and j of host: NV# when NVML counted links between them, else the PCI link.
 * *nvlinks receives the count (0 for a PCI link). */
weft__pci_link weft__topo_device_link(const weft__topo_host *host, int i, int j, int *nvlinks);
/* "X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS", "?" */
const char *weft__topo_pci_link_name(weft__pci_link l);

/* The HCAs the ib transport can use (transports/ib/ib_dev.h: active IB or RoCE ports that
 * WEFT_IB_HCA selects, through libibverbs or WEFT_IB_LIBRARY) into host's device list, one
 * entry per device (kind "ib" or "roce", its PCI address, path, NUMA node, speed), updating
 * an entry hwloc already listed under that name. Nothing without verbs headers at build
 * time, with WEFT_IB_DISABLE=1, or without a library or device. Defined by the ib transport
 * (transports/ib/ib_topo.c), which alone knows its discovery. */
void weft__topo_discover_ib(weft__topo_host *host);
/* The HCA rank should use: among its host's "ib"/"roce" devices, those on the rank's NUMA
 * node (all of them when none is, or the node is unknown), the (k mod count)-th where k
 * counts the host's ranks on that node before this one, so ranks sharing a node spread over
 * its HCAs (as NCCL does). Returns the index into the host's devices, or -1 (no HCA). */
int weft__topo_pick_hca(const weft__topo_system *sys, int rank);

/* Collective: every rank discovers, the summaries are all-gathered and merged into *sys
 * (release with weft__topo_system_free). With WEFT_TOPO_FILE set, the file's view
 * replaces the detected one (its rank count must match). */
weft_status_t weft__topo_build(struct weft_comm *comm, weft__topo_system *sys);
/* Merges nranks summaries (index = rank) into *sys. Errors: WEFT_ERR_NO_MEMORY,
 * WEFT_ERR_INVALID_ARGUMENT (a summary of the wrong magic or rank). */
weft_status_t weft__topo_merge(const weft__topo_summary *all, int nranks, weft__topo_system *sys);
void weft__topo_system_free(weft__topo_system *sys);
/* WEFT_TOPO_FILE: when set, the file's view replaces *sys (its rank count must match). */
weft_status_t weft__topo_load_override(struct weft_comm *comm, weft__topo_system *sys);
/* 1 when both views hold the same hosts and ranks (source is not compared). */
int weft__topo_system_equal(const weft__topo_system *a, const weft__topo_system *b);

weft__link_class weft__topo_link(const weft__topo_system *sys, int a, int b);
/* "X", "L3", "NUMA", "HOST", "NET". */
const char *weft__topo_link_name(weft__link_class c);

/* CPU sets as "0-3,8,10-11" (OS numbering); "" for an empty set. */
void weft__topo_cpuset_str(const uint8_t *set, char *buf, size_t len);
/* Parses that form; 0 on success, -1 when malformed or beyond WEFT__TOPO_MAX_CPUS. */
int weft__topo_cpuset_parse(const char *s, uint8_t *set);
int weft__topo_cpuset_count(const uint8_t *set);
/* The lowest CPU in the set, or -1 for an empty set. Pure; thread-safe. */
int weft__topo_cpuset_first(const uint8_t *set);
/* 1 when the two sets share a CPU. */
int weft__topo_cpusets_meet(const uint8_t *a, const uint8_t *b);

/* ---- the communicator's view (topo/comm_topo.c) ---- */
/* This rank's summary for init: like weft__topo_discover but from /sys unless
 * WEFT_TOPO_HWLOC=1 (hwloc's topology load took 60-140 ms on the 2-core VM, /sys 0.8 ms,
 * and init latency matters). host.hash is set by the caller. */
void weft__topo_discover_quick(weft__topo_summary *out);
/* From the all-gathered summaries (index = rank) to comm->topo, comm->ring and
 * comm->ring_pos; then WEFT_TOPO_FILE replaces the view, WEFT_TOPO_DUMP_FILE receives it
 * (rank 0 writes), and comm->peers' host identities are set from the view so every user of
 * the host grouping agrees with it. Identical on every rank. */
weft_status_t weft__topo_comm_setup(struct weft_comm *comm, const weft__topo_summary *all);
void weft__topo_comm_free(struct weft_comm *comm);
/* The ring order of sys: ranks of a host contiguous (hosts in order of their first rank),
 * within a host by NUMA node (unknown last), then by lowest CPU, then by rank.
 * ring[p] = rank at position p. WEFT_RING_ORDER=rank keeps rank order. */
void weft__topo_ring_order(const weft__topo_system *sys, int *ring);
/* Pins the calling thread to this rank's CPUs (comm->topo), narrowed to one NUMA node when
 * the rank spans several (the node it runs on now): for the stream progress thread, so it
 * stays beside the rank's memory. Returns 0, or -1 when nothing was done (no view,
 * WEFT_PROGRESS_BIND=0, or the call failed; the thread then keeps its affinity). */
int weft__topo_place_thread(struct weft_comm *comm);
/* The NIC the socket transport should use when WEFT_SOCKET_IFNAME is unset: among the
 * host's PCI NICs that are up with a usable address, one on this rank's NUMA node (the
 * first listed). Returns 0 and fills ifname and *addr (its IPv4 address before IPv6, port
 * 0; WEFT_SOCKET_FAMILY restricts the family), or -1: no preference (fewer than two
 * candidates, unknown locality); then the transport keeps its default choice. */
int weft__topo_pick_nic(const struct weft_comm *comm, char *ifname, size_t len,
                        weft__sockaddr *addr);

/* Writes *sys as XML to path / reads it back (format documented in topo/xml.c).
 * Errors: WEFT_ERR_SYSTEM (file), WEFT_ERR_INVALID_ARGUMENT (malformed; the message says
 * the line and what was wrong). */
weft_status_t weft__topo_xml_dump(const weft__topo_system *sys, const char *path);
weft_status_t weft__topo_xml_load(const char *path, weft__topo_system *sys);
/* The same from memory: the len bytes at buf (name: what the messages call it). */
weft_status_t weft__topo_xml_parse(const char *buf, size_t len, const char *name, weft__topo_system *sys);
#endif

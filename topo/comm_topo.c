/* comm_topo.c: the communicator's system view and what it decides.
 *
 * At init every rank adds its topology summary (discovered from /sys: 0.8 ms, against
 * 60-140 ms for hwloc's topology load on the 2-core VM) to the bootstrap all-gather that
 * already carries its host identity, so building the view costs no extra round. Every
 * rank merges the same summaries the same way (merge.c), so all of them hold the same
 * view and derive the same decisions from it without talking again:
 *   - the transport per pair (lib/comm.c): shm within a host, sockets across;
 *   - the ring order (weft__topo_ring_order): a host's ranks contiguous, so the flat ring
 *     crosses each inter-host link once per direction rather than at every rank
 *     (NCCL orders its rings the same way), and within a host by NUMA node then core;
 *   - the NIC of the socket transport (weft__topo_pick_nic): one beside the rank's NUMA
 *     node when the host has several;
 *   - the CPUs of the stream progress thread (weft__topo_place_thread).
 * WEFT_TOPO_FILE replaces the detected view (every rank must see the same file);
 * WEFT_TOPO_DUMP_FILE receives it from rank 0. */
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/comm.h"
#include "lib/env.h"
#include "lib/sockutil.h"
#include "lib/log.h"
#include "lib/status.h"
#include "topo/topo.h"

/* ---- ring order ----------------------------------------------------------------------- */
typedef struct {
  int host, numa, cpu, rank;
} ring_key;

/* The lowest CPU of a rank's set; an empty set sorts last. */
static int lowest_cpu(const uint8_t *set) {
  int c = weft__topo_cpuset_first(set);
  return c >= 0 ? c : INT_MAX;
}

static int cmp_key(const void *pa, const void *pb) {
  const ring_key *a = pa, *b = pb;
  if (a->host != b->host) return a->host < b->host ? -1 : 1;
  if (a->numa != b->numa) return a->numa < b->numa ? -1 : 1;
  if (a->cpu != b->cpu) return a->cpu < b->cpu ? -1 : 1;
  return a->rank < b->rank ? -1 : a->rank > b->rank;
}

void weft__topo_ring_order(const weft__topo_system *sys, int *ring) {
  int n = sys->nranks;
  ring_key *keys = malloc((size_t)n * sizeof(*keys));
  int rank_order = strcmp(weft__env_str("WEFT_RING_ORDER", "topo"), "rank") == 0;
  if (keys == NULL || rank_order) { /* rank order: the fallback needs no memory */
    for (int p = 0; p < n; p++) ring[p] = p;
    free(keys);
    return;
  }
  for (int r = 0; r < n; r++) {
    const weft__topo_rank *x = &sys->ranks[r];
    keys[r] = (ring_key){x->host, x->numa >= 0 ? x->numa : INT_MAX, lowest_cpu(x->cpuset), r};
  }
  qsort(keys, (size_t)n, sizeof(*keys), cmp_key);
  for (int p = 0; p < n; p++) ring[p] = keys[p].rank;
  free(keys);
}

/* ---- init ----------------------------------------------------------------------------- */
static void log_ring(const struct weft_comm *c) {
  if (c->rank != 0 || weft__log_level() < WEFT__LOG_INFO) return;
  char buf[512];
  size_t used = 0;
  buf[0] = '\0';
  for (int p = 0; p < c->nranks && used + 16 < sizeof(buf); p++) {
    int r = c->ring[p], sep = p > 0 && c->topo->ranks[r].host != c->topo->ranks[c->ring[p - 1]].host;
    used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s%d", p == 0 ? "" : sep ? " | " : " ", r);
  }
  WEFT_INFO("topology: %d ranks on %d hosts (%s); ring order %s%s", c->nranks, c->topo->nhosts,
            c->topo->source, buf, used + 16 >= sizeof(buf) ? " ..." : "");
}

static void dump_if_asked(const struct weft_comm *c) {
  const char *path = weft__env_str("WEFT_TOPO_DUMP_FILE", NULL);
  if (path == NULL || c->rank != 0) return;
  weft__error_quiet(1);
  weft_status_t st = weft__topo_xml_dump(c->topo, path);
  weft__error_quiet(0);
  if (st != WEFT_SUCCESS) WEFT_WARN("WEFT_TOPO_DUMP_FILE=%s: %s", path, weft_get_last_error(NULL));
}

weft_status_t weft__topo_comm_setup(struct weft_comm *c, const weft__topo_summary *all) {
  c->topo = calloc(1, sizeof(*c->topo));
  c->ring = calloc((size_t)c->nranks, sizeof(int));
  c->ring_pos = calloc((size_t)c->nranks, sizeof(int));
  if (c->topo == NULL || c->ring == NULL || c->ring_pos == NULL)
    return weft__error(c, WEFT_ERR_NO_MEMORY, "rank %d: init: topology: out of memory", c->rank);
  weft_status_t st = weft__topo_merge(all, c->nranks, c->topo);
  if (st != WEFT_SUCCESS)
    return weft__error(c, st, "rank %d: init: %s", c->rank, weft_get_last_error(NULL));
  WEFT_TRY(weft__topo_load_override(c, c->topo));
  /* One host grouping for everything: the transports, the tuner and hier.c read peers. */
  for (int p = 0; p < c->nranks; p++) c->peers[p].host_hash = c->topo->hosts[c->topo->ranks[p].host].hash;
  weft__topo_ring_order(c->topo, c->ring);
  for (int p = 0; p < c->nranks; p++) c->ring_pos[c->ring[p]] = p;
  log_ring(c);
  dump_if_asked(c);
  return WEFT_SUCCESS;
}

void weft__topo_comm_free(struct weft_comm *c) {
  if (c->topo != NULL) weft__topo_system_free(c->topo);
  free(c->topo);
  free(c->ring);
  free(c->ring_pos);
  c->topo = NULL;
  c->ring = c->ring_pos = NULL;
}

/* ---- the progress thread's CPUs ------------------------------------------------------- */
static int has_cpu(const uint8_t *set, int c) { return (set[c / 8] >> (c % 8)) & 1; }

/* Narrows set to the NUMA node holding the CPU this thread runs on (when that leaves any). */
static void narrow_to_current_node(uint8_t *set) {
  int cpu = sched_getcpu();
  if (cpu < 0 || cpu >= WEFT__TOPO_MAX_CPUS) return;
  for (int node = 0; node < 1024; node++) {
    char path[96], line[4096];
    snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", node);
    FILE *f = fopen(path, "r");
    if (f == NULL) return; /* nodes are numbered densely on the machines we know */
    uint8_t nodeset[WEFT__TOPO_MAX_CPUS / 8];
    int ok = fgets(line, sizeof(line), f) != NULL && weft__topo_cpuset_parse(line, nodeset) == 0;
    fclose(f);
    if (!ok || !has_cpu(nodeset, cpu)) continue;
    uint8_t both[WEFT__TOPO_MAX_CPUS / 8];
    for (int i = 0; i < WEFT__TOPO_MAX_CPUS / 8; i++) both[i] = set[i] & nodeset[i];
    if (weft__topo_cpuset_count(both) > 0) memcpy(set, both, sizeof(both));
    return;
  }
}

int weft__topo_place_thread(struct weft_comm *comm) {
  if (comm == NULL || comm->topo == NULL || weft__env_long("WEFT_PROGRESS_BIND", 1) == 0) return -1;
  const weft__topo_rank *me = &comm->topo->ranks[comm->rank];
  uint8_t set[WEFT__TOPO_MAX_CPUS / 8];
  memcpy(set, me->cpuset, sizeof(set));
  if (me->numa < 0) narrow_to_current_node(set);
  cpu_set_t now, want;
  /* Stay inside what the process may use: a view loaded from a file may be stale. */
  if (sched_getaffinity(0, sizeof(now), &now) != 0) return -1;
  CPU_ZERO(&want);
  for (int c = 0; c < WEFT__TOPO_MAX_CPUS && c < CPU_SETSIZE; c++)
    if (has_cpu(set, c) && CPU_ISSET(c, &now)) CPU_SET(c, &want);
  if (CPU_COUNT(&want) == 0) return -1;
  if (pthread_setaffinity_np(pthread_self(), sizeof(want), &want) != 0) return -1;
  char buf[128];
  weft__topo_cpuset_str(set, buf, sizeof(buf));
  WEFT_INFO("rank %d: progress thread bound to CPUs %s", comm->rank, buf);
  return 0;
}

/* ---- the NIC of the socket transport -------------------------------------------------- */
/* name's address (IPv4 before a non-link-local IPv6), port 0; 0 when it has one and is up. */
static int nic_addr(const char *name, weft__sockaddr *out) {
  struct ifaddrs *all;
  if (getifaddrs(&all) != 0) return -1;
  const struct ifaddrs *v4 = NULL, *v6 = NULL;
  int family = weft__sock_family_wanted();
  for (struct ifaddrs *a = all; a != NULL; a = a->ifa_next) {
    if (a->ifa_addr == NULL || !(a->ifa_flags & IFF_UP) || strcmp(a->ifa_name, name) != 0) continue;
    int f = a->ifa_addr->sa_family;
    if (family != AF_UNSPEC && f != family) continue;
    if (f == AF_INET && v4 == NULL) v4 = a;
    if (f == AF_INET6 && v6 == NULL &&
        !IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)a->ifa_addr)->sin6_addr))
      v6 = a;
  }
  const struct ifaddrs *pick = v4 ? v4 : v6;
  if (pick != NULL && out != NULL) {
    memset(out, 0, sizeof(*out));
    out->len = pick->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    memcpy(&out->ss, pick->ifa_addr, out->len);
    weft__sockaddr_set_port(out, 0);
  }
  freeifaddrs(all);
  return pick != NULL ? 0 : -1;
}

int weft__topo_pick_nic(const struct weft_comm *comm, char *ifname, size_t len, weft__sockaddr *addr) {
  if (comm->topo == NULL) return -1;
  const weft__topo_rank *me = &comm->topo->ranks[comm->rank];
  const weft__topo_host *host = &comm->topo->hosts[me->host];
  int usable = 0, best = -1;
  for (int i = 0; i < host->ndevices; i++) {
    const weft__topo_device *d = &host->devices[i];
    if (strcmp(d->kind, "nic") != 0 || d->name[0] == '\0' || nic_addr(d->name, NULL) != 0) continue;
    usable++;
    if (best < 0 && me->numa >= 0 && d->numa == me->numa) best = i;
  }
  if (usable < 2 || best < 0) return -1; /* one choice, or no locality to go by */
  if (nic_addr(host->devices[best].name, addr) != 0) return -1;
  snprintf(ifname, len, "%s", host->devices[best].name);
  return 0;
}

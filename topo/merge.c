/* merge.c: from every rank's summary to one system view, and the link class of a pair.
 *
 * weft__topo_build is collective: each rank discovers its own view (discover.c), the
 * fixed-size summaries are all-gathered as bytes (sizeof(weft__topo_summary) uint8 per
 * rank: one all-gather of a few KiB per rank), and every rank merges them the same way:
 * hosts in order of their first rank, told apart by host hash (the identity the
 * communicator uses for shared memory), ranks numbered within their host. So every rank
 * holds the same view without a second exchange.
 *
 * Link classes, closest first: L3 (same host, both ranks' CPUs inside one L3 cache, a
 * "core group"), NUMA (same host and NUMA node), HOST (same host otherwise), NET. A rank
 * whose CPUs span several L3s or NUMA nodes (e.g. unbound) has no group at that level. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/comm.h"
#include "lib/env.h"
#include "lib/status.h"
#include "topo/topo.h"

static int has_cpu(const uint8_t *set, int c) { return (set[c / 8] >> (c % 8)) & 1; }

int weft__topo_cpuset_count(const uint8_t *set) {
  int n = 0;
  for (int c = 0; c < WEFT__TOPO_MAX_CPUS; c++) n += has_cpu(set, c);
  return n;
}

int weft__topo_cpuset_first(const uint8_t *set) {
  for (int c = 0; c < WEFT__TOPO_MAX_CPUS; c++)
    if (has_cpu(set, c)) return c;
  return -1;
}

int weft__topo_cpusets_meet(const uint8_t *a, const uint8_t *b) {
  for (int i = 0; i < WEFT__TOPO_MAX_CPUS / 8; i++)
    if (a[i] & b[i]) return 1;
  return 0;
}

void weft__topo_cpuset_str(const uint8_t *set, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int c = 0; c < WEFT__TOPO_MAX_CPUS && used < len; c++) {
    if (!has_cpu(set, c)) continue;
    int end = c;
    while (end + 1 < WEFT__TOPO_MAX_CPUS && has_cpu(set, end + 1)) end++;
    int w = end == c ? snprintf(buf + used, len - used, "%s%d", used ? "," : "", c)
                     : snprintf(buf + used, len - used, "%s%d-%d", used ? "," : "", c, end);
    if (w < 0) return;
    used += (size_t)w;
    c = end;
  }
}

int weft__topo_cpuset_parse(const char *s, uint8_t *set) {
  memset(set, 0, WEFT__TOPO_MAX_CPUS / 8);
  while (*s == ' ') s++;
  while (*s != '\0') {
    char *end;
    long lo = strtol(s, &end, 10), hi = lo;
    if (end == s) return -1;
    if (*end == '-') {
      s = end + 1;
      hi = strtol(s, &end, 10);
      if (end == s) return -1;
    }
    if (lo < 0 || hi < lo || hi >= WEFT__TOPO_MAX_CPUS) return -1;
    for (long c = lo; c <= hi; c++) set[c / 8] |= 1u << (c % 8);
    s = end;
    if (*s == ',') s++;
    else if (*s != '\0' && *s != '\n' && *s != ' ') return -1;
    else break;
  }
  return 0;
}

void weft__topo_system_free(weft__topo_system *sys) {
  free(sys->hosts);
  free(sys->ranks);
  memset(sys, 0, sizeof(*sys));
}

int weft__topo_system_equal(const weft__topo_system *a, const weft__topo_system *b) {
  return a->nranks == b->nranks && a->nhosts == b->nhosts &&
         memcmp(a->hosts, b->hosts, sizeof(*a->hosts) * (size_t)a->nhosts) == 0 &&
         memcmp(a->ranks, b->ranks, sizeof(*a->ranks) * (size_t)a->nranks) == 0;
}

/* The host index of hash among sys->hosts[0..nhosts), or -1. */
static int find_host(const weft__topo_system *sys, uint64_t hash) {
  for (int h = 0; h < sys->nhosts; h++)
    if (sys->hosts[h].hash == hash) return h;
  return -1;
}

/* Whether the n bytes at s hold a NUL (a string field that a reader may strcmp or print). */
static int terminated(const char *s, size_t n) { return memchr(s, '\0', n) != NULL; }

/* What is wrong with a summary that came off the wire, or NULL: the readers of the merged
 * view index devices[0..ndevices) and treat the name fields as strings. Found by fuzzing
 * (tests/fuzz/fuzz_topo_summary.c): ndevices 1000 made weft__topo_pick_hca read past the host. */
static const char *summary_problem(const weft__topo_summary *s) {
  const weft__topo_host *h = &s->host;
  if (h->ndevices < 0 || h->ndevices > WEFT__TOPO_MAX_DEVICES) return "device count out of range";
  if (!terminated(h->hostname, sizeof h->hostname) || !terminated(h->discovery, sizeof h->discovery) ||
      !terminated(h->cpu, sizeof h->cpu) || !terminated(s->self.nic, sizeof s->self.nic))
    return "unterminated host, discovery, CPU or NIC name";
  for (int i = 0; i < h->ndevices; i++) {
    const weft__topo_device *d = &h->devices[i];
    if (!terminated(d->kind, sizeof d->kind) || !terminated(d->name, sizeof d->name) ||
        !terminated(d->pci, sizeof d->pci) || !terminated(d->path, sizeof d->path))
      return "unterminated device name";
  }
  return NULL;
}

weft_status_t weft__topo_merge(const weft__topo_summary *all, int nranks, weft__topo_system *sys) {
  memset(sys, 0, sizeof(*sys));
  sys->hosts = calloc((size_t)nranks, sizeof(*sys->hosts));
  sys->ranks = calloc((size_t)nranks, sizeof(*sys->ranks));
  if (sys->hosts == NULL || sys->ranks == NULL) {
    weft__topo_system_free(sys);
    return weft__error(NULL, WEFT_ERR_NO_MEMORY, "topology merge: out of memory for %d ranks", nranks);
  }
  sys->nranks = nranks;
  snprintf(sys->source, sizeof(sys->source), "detected");
  for (int r = 0; r < nranks; r++) {
    if (all[r].magic != WEFT__TOPO_MAGIC || all[r].rank != r) {
      weft__topo_system_free(sys);
      return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT,
                         "topology merge: summary of rank %d is malformed (magic 0x%x, rank %d): "
                         "ranks built from different weft versions?", r, all[r].magic, all[r].rank);
    }
    const char *problem = summary_problem(&all[r]);
    if (problem != NULL) {
      weft__topo_system_free(sys);
      return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "topology merge: summary of rank %d is malformed: %s",
                         r, problem);
    }
    int h = find_host(sys, all[r].host.hash);
    if (h < 0) {
      h = sys->nhosts++;
      sys->hosts[h] = all[r].host;
      sys->hosts[h].nranks = 0;
    }
    sys->ranks[r] = all[r].self;
    sys->ranks[r].host = h;
    sys->ranks[r].local_rank = sys->hosts[h].nranks++;
  }
  return WEFT_SUCCESS;
}

weft__link_class weft__topo_link(const weft__topo_system *sys, int a, int b) {
  if (a == b) return WEFT__LINK_SELF;
  const weft__topo_rank *ra = &sys->ranks[a], *rb = &sys->ranks[b];
  if (ra->host != rb->host) return WEFT__LINK_NET;
  if (ra->core_group >= 0 && ra->core_group == rb->core_group) return WEFT__LINK_L3;
  if (ra->numa >= 0 && ra->numa == rb->numa) return WEFT__LINK_NUMA;
  return WEFT__LINK_HOST;
}

const char *weft__topo_link_name(weft__link_class c) {
  static const char *names[WEFT__NUM_LINKS] = {"X", "L3", "NUMA", "HOST", "NET"};
  return (unsigned)c < WEFT__NUM_LINKS ? names[c] : "?";
}

/* WEFT_TOPO_FILE: a (possibly corrected) view replaces the detected one. */
weft_status_t weft__topo_load_override(struct weft_comm *comm, weft__topo_system *sys) {
  const char *path = weft__env_str("WEFT_TOPO_FILE", NULL);
  if (path == NULL) return WEFT_SUCCESS;
  weft__topo_system loaded;
  weft__error_quiet(1);
  weft_status_t st = weft__topo_xml_load(path, &loaded);
  weft__error_quiet(0);
  if (st != WEFT_SUCCESS)
    return weft__error(comm, st, "rank %d: topology: WEFT_TOPO_FILE: %s", comm->rank,
                       weft_get_last_error(NULL));
  if (loaded.nranks != comm->nranks) {
    int n = loaded.nranks;
    weft__topo_system_free(&loaded);
    return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT,
                       "rank %d: topology: WEFT_TOPO_FILE %s describes %d ranks, the communicator has %d",
                       comm->rank, path, n, comm->nranks);
  }
  weft__topo_system_free(sys);
  *sys = loaded;
  return WEFT_SUCCESS;
}

weft_status_t weft__topo_build(struct weft_comm *comm, weft__topo_system *sys) {
  memset(sys, 0, sizeof(*sys));
  weft__topo_summary *all = calloc((size_t)comm->nranks, sizeof(*all));
  if (all == NULL)
    return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: topology: out of memory", comm->rank);
  weft__topo_summary *mine = &all[comm->rank];
  weft__topo_discover(mine);
  mine->rank = comm->rank;
  mine->host.hash = comm->peers[comm->rank].host_hash; /* the communicator's own identity */
  weft_status_t st = weft_all_gather(mine, all, WEFT__TOPO_SUMMARY_BYTES, WEFT_UINT8, comm, NULL);
  if (st == WEFT_SUCCESS) st = weft__topo_merge(all, comm->nranks, sys);
  free(all);
  if (st == WEFT_SUCCESS) st = weft__topo_load_override(comm, sys);
  return st;
}

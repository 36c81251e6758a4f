/* xml_load.c: reads the system view written by topo/xml.c (WEFT_TOPO_FILE) with libxml2.
 *
 * Why libxml2: the file is meant to be edited by hand, and a hand-written parser accepted
 * only what topo/xml.c itself writes (single-quoted attributes, CDATA, character
 * references or a DOCTYPE were refused). libxml2 takes any well-formed XML; weft then
 * walks the tree: <weft-topology> first, <host> with its <device> children, <rank>.
 * Unknown elements and attributes are ignored; a missing or malformed required one is an
 * error naming the file and the element's line. Network access and entity expansion are
 * off (XML_PARSE_NONET, no XML_PARSE_NOENT): a topology file cannot make weft read others.
 * Without libxml2 at build time, loading says so (writing needs no library). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/status.h"
#include "topo/topo.h"

#ifndef WEFT_HAVE_LIBXML2
weft_status_t weft__topo_xml_load(const char *path, weft__topo_system *sys) {
  memset(sys, 0, sizeof(*sys));
  return weft__error(NULL, WEFT_ERR_UNSUPPORTED,
                     "topology load: %s: weft was built without libxml2 (Debian: libxml2-dev), which "
                     "reads topology files", path);
}

weft_status_t weft__topo_xml_parse(const char *buf, size_t len, const char *name, weft__topo_system *sys) {
  (void)buf;
  (void)len;
  return weft__topo_xml_load(name, sys);
}
#else
#include <libxml/parser.h>
#include <libxml/tree.h>

typedef struct {
  weft__topo_system *sys;
  unsigned char *seen; /* [nranks] rank elements read */
  unsigned char *host_seen; /* [nhosts] host elements read */
  long line;           /* of the element being handled (libxml2: where its start tag ends) */
  char element[32];    /* its name */
  char err[320];
} loader;

/* The attribute's value (malloc'd by libxml2, freed by the caller), or NULL. */
static char *attr(xmlNode *n, const char *name) { return (char *)xmlGetProp(n, (const xmlChar *)name); }

static int fail(loader *ld, const char *fmt, const char *a, const char *b) {
  snprintf(ld->err, sizeof(ld->err), fmt, a, b);
  return -1;
}

/* Integer attribute into *out; 0, or -1 with ld->err set when missing or malformed. */
static int attr_int(loader *ld, xmlNode *n, const char *name, long lo, long hi, int32_t *out) {
  char *v = attr(n, name), *end = NULL;
  long x = v ? strtol(v, &end, 0) : 0;
  int bad = v == NULL || end == v || *end != '\0' || x < lo || x > hi;
  if (bad)
    snprintf(ld->err, sizeof(ld->err), "attribute %s=\"%s\": %s (expected %ld..%ld)", name, v ? v : "",
             v ? "out of range or not a number" : "missing", lo, hi);
  else
    *out = (int32_t)x;
  xmlFree(v);
  return bad ? -1 : 0;
}

/* 1 when n has attribute name (for the optional ones: files written before them). */
static int has_attr(xmlNode *n, const char *name) {
  char *v = attr(n, name);
  xmlFree(v);
  return v != NULL;
}

static int attr_str(loader *ld, xmlNode *n, const char *name, char *out, size_t len) {
  char *v = attr(n, name);
  int bad = v == NULL || strlen(v) >= len;
  if (bad) fail(ld, "attribute %s: %s", name, v ? "too long" : "missing");
  else snprintf(out, len, "%s", v);
  xmlFree(v);
  return bad ? -1 : 0;
}

static int on_topology(loader *ld, xmlNode *n) {
  int32_t version, nranks, nhosts;
  if (attr_int(ld, n, "version", 1, 1, &version) || attr_int(ld, n, "nranks", 1, 1 << 20, &nranks) ||
      attr_int(ld, n, "nhosts", 1, nranks, &nhosts))
    return -1;
  ld->sys->hosts = calloc((size_t)nhosts, sizeof(*ld->sys->hosts));
  ld->sys->ranks = calloc((size_t)nranks, sizeof(*ld->sys->ranks));
  ld->seen = calloc((size_t)nranks, 1);
  ld->host_seen = calloc((size_t)nhosts, 1);
  if (!ld->sys->hosts || !ld->sys->ranks || !ld->seen || !ld->host_seen) return fail(ld, "out of memory%s%s", "", "");
  ld->sys->nranks = nranks;
  ld->sys->nhosts = nhosts;
  return 0;
}

static int on_device(loader *ld, weft__topo_host *h, xmlNode *n) {
  if (h->ndevices >= WEFT__TOPO_MAX_DEVICES) return 0; /* as discovery: the rest is dropped */
  weft__topo_device *d = &h->devices[h->ndevices];
  if (attr_str(ld, n, "kind", d->kind, sizeof(d->kind)) || attr_str(ld, n, "name", d->name, sizeof(d->name)) ||
      attr_str(ld, n, "pci", d->pci, sizeof(d->pci)) || attr_int(ld, n, "numa", -1, 1 << 20, &d->numa) ||
      attr_int(ld, n, "speed-mbps", -1, 1 << 30, &d->speed_mbps) ||
      (xmlHasProp(n, (const xmlChar *)"path") != NULL && attr_str(ld, n, "path", d->path, sizeof(d->path))))
    return -1;
  char *cpus = attr(n, "cpus");
  int bad = cpus != NULL && weft__topo_cpuset_parse(cpus, d->cpus) != 0;
  if (bad) fail(ld, "attribute cpus=\"%s\": malformed%s", cpus, "");
  xmlFree(cpus);
  if (bad) return -1;
  h->ndevices++;
  return 0;
}

/* <nvlink a="I" b="J" links="N"/>: N NVLinks between devices I and J of the host (read
 * after every <device> of it, so both indices are known). */
static int on_nvlink(loader *ld, weft__topo_host *h, xmlNode *n) {
  int32_t a, b, links;
  if (attr_int(ld, n, "a", 0, h->ndevices - 1, &a) || attr_int(ld, n, "b", 0, h->ndevices - 1, &b) ||
      attr_int(ld, n, "links", 0, 255, &links))
    return -1;
  if (a == b) {
    snprintf(ld->err, sizeof(ld->err), "a=\"%d\" b=\"%d\": a device has no NVLink to itself", a, b);
    return -1;
  }
  h->nvlinks[a][b] = h->nvlinks[b][a] = (uint8_t)links;
  return 0;
}

static int is(xmlNode *n, const char *name) {
  return n->type == XML_ELEMENT_NODE && strcmp((const char *)n->name, name) == 0;
}

static int on_host(loader *ld, xmlNode *n) {
  int32_t idx;
  if (attr_int(ld, n, "index", 0, ld->sys->nhosts - 1, &idx)) return -1;
  /* A second <host> of an index was merged into the first and left another host all zero
   * (found by tests/fuzz/fuzz_topo_xml.c): refuse it, as a rank given twice. */
  if (ld->host_seen[idx]) {
    snprintf(ld->err, sizeof(ld->err), "host %d given twice", idx);
    return -1;
  }
  ld->host_seen[idx] = 1;
  weft__topo_host *h = &ld->sys->hosts[idx];
  char *hash = attr(n, "hash"), *end = NULL;
  h->hash = hash ? strtoull(hash, &end, 0) : 0;
  int bad = hash == NULL || end == hash || *end != '\0';
  xmlFree(hash);
  if (bad) return fail(ld, "attribute hash: missing or not a number%s%s", "", "");
  if (attr_str(ld, n, "hostname", h->hostname, sizeof(h->hostname)) ||
      attr_str(ld, n, "discovery", h->discovery, sizeof(h->discovery)) ||
      (has_attr(n, "cpu") && attr_str(ld, n, "cpu", h->cpu, sizeof(h->cpu))) ||
      attr_int(ld, n, "packages", 0, 1 << 20, &h->packages) ||
      attr_int(ld, n, "numa-nodes", 0, 1 << 20, &h->numa_nodes) || attr_int(ld, n, "cores", 0, 1 << 20, &h->cores) ||
      attr_int(ld, n, "pus", 0, 1 << 20, &h->pus) || attr_int(ld, n, "l3-caches", 0, 1 << 20, &h->l3_caches))
    return -1;
  for (xmlNode *c = n->children; c != NULL; c = c->next) {
    ld->line = xmlGetLineNo(c);
    snprintf(ld->element, sizeof(ld->element), "<%s>", (const char *)c->name);
    if (is(c, "device") && on_device(ld, h, c) != 0) return -1;
  }
  char *nv = attr(n, "nvlink");
  h->nvlink_known = nv != NULL && strcmp(nv, "nvml") == 0;
  xmlFree(nv);
  for (xmlNode *c = n->children; c != NULL && h->nvlink_known; c = c->next) {
    ld->line = xmlGetLineNo(c);
    snprintf(ld->element, sizeof(ld->element), "<%s>", (const char *)c->name);
    if (is(c, "nvlink") && on_nvlink(ld, h, c) != 0) return -1;
  }
  return 0;
}

static int on_rank(loader *ld, xmlNode *n) {
  int32_t idx;
  if (attr_int(ld, n, "index", 0, ld->sys->nranks - 1, &idx)) return -1;
  if (ld->seen[idx]) {
    snprintf(ld->err, sizeof(ld->err), "rank %d given twice", idx);
    return -1;
  }
  ld->seen[idx] = 1;
  weft__topo_rank *r = &ld->sys->ranks[idx];
  char *cpus = attr(n, "cpuset");
  int bad = cpus == NULL || weft__topo_cpuset_parse(cpus, r->cpuset) != 0;
  if (bad) fail(ld, "attribute cpuset=\"%s\": malformed%s", cpus ? cpus : "", "");
  xmlFree(cpus);
  return bad || attr_int(ld, n, "host", 0, ld->sys->nhosts - 1, &r->host) ||
                 attr_int(ld, n, "numa", -1, 1 << 20, &r->numa) ||
                 attr_int(ld, n, "core-group", -1, 1 << 20, &r->core_group) ||
                 attr_str(ld, n, "nic", r->nic, sizeof(r->nic)) ||
                 attr_int(ld, n, "nic-speed-mbps", -1, 1 << 30, &r->nic_speed_mbps) ||
                 attr_int(ld, n, "nic-numa", -1, 1 << 20, &r->nic_numa) ||
                 attr_int(ld, n, "pid", 0, 1 << 30, &r->pid)
             ? -1
             : 0;
}

static int walk(loader *ld, xmlNode *root) {
  if (root == NULL) return fail(ld, "no root element%s%s", "", "");
  ld->line = xmlGetLineNo(root);
  if (!is(root, "weft-topology")) return fail(ld, "the root element is <%s>, not <weft-topology>%s", (const char *)root->name, "");
  snprintf(ld->element, sizeof(ld->element), "<weft-topology>");
  if (on_topology(ld, root) != 0) return -1;
  for (xmlNode *n = root->children; n != NULL; n = n->next) {
    ld->line = xmlGetLineNo(n);
    snprintf(ld->element, sizeof(ld->element), "<%s>", (const char *)n->name);
    if (is(n, "host") && on_host(ld, n) != 0) return -1;
    if (is(n, "rank") && on_rank(ld, n) != 0) return -1;
  }
  return 0;
}

/* After the walk: every rank and host present, host rank counts and local ranks recomputed. */
static int finish(loader *ld) {
  weft__topo_system *sys = ld->sys;
  for (int r = 0; r < sys->nranks; r++) {
    if (!ld->seen[r]) {
      snprintf(ld->element, sizeof(ld->element), "<weft-topology>");
      snprintf(ld->err, sizeof(ld->err), "no <rank index=\"%d\">", r);
      return -1;
    }
    weft__topo_host *h = &sys->hosts[sys->ranks[r].host];
    sys->ranks[r].local_rank = h->nranks++;
  }
  for (int h = 0; h < sys->nhosts; h++)
    if (!ld->host_seen[h]) {
      snprintf(ld->element, sizeof(ld->element), "<weft-topology>");
      snprintf(ld->err, sizeof(ld->err), "no <host index=\"%d\">", h);
      return -1;
    }
  return 0;
}

/* libxml2's complaint about a file that is not well-formed: "line N: message". */
static void parse_error(loader *ld) {
  const xmlError *e = xmlGetLastError();
  ld->line = e ? e->line : 0;
  snprintf(ld->element, sizeof(ld->element), "XML");
  snprintf(ld->err, sizeof(ld->err), "not well-formed XML: %s", e && e->message ? e->message : "unknown error");
  size_t n = strlen(ld->err);
  while (n > 0 && ld->err[n - 1] == '\n') ld->err[--n] = '\0';
}

/* Walks doc (NULL: libxml2 could not parse it) into *sys; name is the file, for messages. */
static weft_status_t load_doc(xmlDoc *doc, const char *name, weft__topo_system *sys) {
  loader ld = {.sys = sys};
  int bad = 0;
  if (doc == NULL) {
    parse_error(&ld);
    bad = 1;
  } else {
    bad = walk(&ld, xmlDocGetRootElement(doc)) != 0 || finish(&ld) != 0;
    xmlFreeDoc(doc);
  }
  free(ld.seen);
  free(ld.host_seen);
  if (bad) {
    weft__topo_system_free(sys);
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "topology load: %s:%ld: %s: %s", name, ld.line,
                       ld.element, ld.err);
  }
  snprintf(sys->source, sizeof(sys->source), "%s", name);
  return WEFT_SUCCESS;
}

#define XML_OPTIONS (XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING)

weft_status_t weft__topo_xml_load(const char *path, weft__topo_system *sys) {
  memset(sys, 0, sizeof(*sys));
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return weft__error(NULL, WEFT_ERR_SYSTEM, "topology load: cannot read %s: %s", path, strerror(errno));
  fclose(f);
  xmlInitParser();
  return load_doc(xmlReadFile(path, NULL, XML_OPTIONS), path, sys);
}

weft_status_t weft__topo_xml_parse(const char *buf, size_t len, const char *name, weft__topo_system *sys) {
  memset(sys, 0, sizeof(*sys));
  if (len > INT_MAX)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "topology load: %s: larger than 2 GiB", name);
  xmlInitParser();
  return load_doc(xmlReadMemory(buf, (int)len, name, NULL, XML_OPTIONS), name, sys);
}
#endif

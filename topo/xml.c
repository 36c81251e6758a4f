/* xml.c: the system view as a small XML file, written by weft-topo --dump (or
 * WEFT_TOPO_DUMP_FILE) and read back through WEFT_TOPO_FILE, so a user can inspect or
 * correct what was detected. The format, one element per line:
 *
 *   <?xml version="1.0" encoding="UTF-8"?>
 *   <weft-topology version="1" nranks="2" nhosts="1">
 *     <host index="0" hostname="node1" hash="0x9b1c..." discovery="hwloc" packages="1"
 *           numa-nodes="1" cores="2" pus="2" l3-caches="1">
 *       <device kind="nic" name="eth0" pci="0000:00:03.0" numa="0" speed-mbps="-1"/>
 *       <device kind="ib" name="mlx5_0" pci="0000:81:00.0" path="/sys/devices/..." numa="1" .../>
 *       (path: optional, HCAs only)
 *     </host>
 *     <rank index="0" host="0" numa="0" core-group="0" cpuset="0-1" nic="eth0"
 *           nic-speed-mbps="-1" nic-numa="0" pid="4242"/>
 *   </weft-topology>
 *
 * numa, core-group, nic-numa and speeds are -1 when unknown; cpuset uses the kernel's list
 * form. A host's rank count and a rank's local rank are not stored: they are recomputed
 * from the rank elements, so moving a rank to another host is a one-attribute edit.
 * Attributes may come in any order; unknown elements and attributes are ignored (newer
 * files stay readable); missing required ones are errors naming the line.
 * The parser is deliberately minimal: elements with quoted attributes, comments, the
 * XML declaration, and the five predefined entities; no DTD, CDATA or namespaces. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/status.h"
#include "topo/topo.h"

#define MAX_FILE_BYTES (16u << 20)
#define MAX_ATTRS 32

/* ---------------------------------------------------------------------------------- */
/* Writing */

static void put_escaped(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
      case '&': fputs("&amp;", f); break;
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '"': fputs("&quot;", f); break;
      case '\'': fputs("&apos;", f); break;
      default: fputc(*s, f);
    }
  }
}

/* name="value" with the value escaped. */
static void put_str(FILE *f, const char *name, const char *value) {
  fprintf(f, " %s=\"", name);
  put_escaped(f, value);
  fputc('"', f);
}

static void dump_host(FILE *f, const weft__topo_host *h, int index) {
  fprintf(f, "  <host index=\"%d\"", index);
  put_str(f, "hostname", h->hostname);
  fprintf(f, " hash=\"0x%016llx\"", (unsigned long long)h->hash);
  put_str(f, "discovery", h->discovery);
  fprintf(f, " packages=\"%d\" numa-nodes=\"%d\" cores=\"%d\" pus=\"%d\" l3-caches=\"%d\">\n",
          h->packages, h->numa_nodes, h->cores, h->pus, h->l3_caches);
  for (int i = 0; i < h->ndevices; i++) {
    const weft__topo_device *d = &h->devices[i];
    fputs("    <device", f);
    put_str(f, "kind", d->kind);
    put_str(f, "name", d->name);
    put_str(f, "pci", d->pci);
    if (d->path[0] != '\0') put_str(f, "path", d->path);
    fprintf(f, " numa=\"%d\" speed-mbps=\"%d\"/>\n", d->numa, d->speed_mbps);
  }
  fputs("  </host>\n", f);
}

static void dump_rank(FILE *f, const weft__topo_rank *r, int index) {
  char cpus[4096];
  weft__topo_cpuset_str(r->cpuset, cpus, sizeof(cpus));
  fprintf(f, "  <rank index=\"%d\" host=\"%d\" numa=\"%d\" core-group=\"%d\" cpuset=\"%s\"",
          index, r->host, r->numa, r->core_group, cpus);
  put_str(f, "nic", r->nic);
  fprintf(f, " nic-speed-mbps=\"%d\" nic-numa=\"%d\" pid=\"%d\"/>\n", r->nic_speed_mbps,
          r->nic_numa, r->pid);
}

weft_status_t weft__topo_xml_dump(const weft__topo_system *sys, const char *path) {
  FILE *f = fopen(path, "w");
  if (f == NULL)
    return weft__error(NULL, WEFT_ERR_SYSTEM, "topology dump: cannot open %s: %s", path, strerror(errno));
  fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
  fputs("<!-- weft topology (weft-topo). Edit and load with WEFT_TOPO_FILE=this-file.\n"
        "     -1 means unknown; cpuset is a list of CPU ids (OS numbering). -->\n", f);
  fprintf(f, "<weft-topology version=\"1\" nranks=\"%d\" nhosts=\"%d\">\n", sys->nranks, sys->nhosts);
  for (int h = 0; h < sys->nhosts; h++) dump_host(f, &sys->hosts[h], h);
  for (int r = 0; r < sys->nranks; r++) dump_rank(f, &sys->ranks[r], r);
  fputs("</weft-topology>\n", f);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad)
    return weft__error(NULL, WEFT_ERR_SYSTEM, "topology dump: writing %s failed", path);
  return WEFT_SUCCESS;
}

/* ---------------------------------------------------------------------------------- */
/* Reading */

typedef struct {
  int n;
  char *name[MAX_ATTRS];
  char *value[MAX_ATTRS];
} attrs;

typedef struct {
  const char *path;
  int line;                /* of the element being handled */
  weft__topo_system *sys;
  int cur_host;            /* the host element devices belong to, -1 outside */
  unsigned char *seen;     /* [nranks] rank elements read */
  char err[256];
} loader;

static const char *attr_get(const attrs *a, const char *name) {
  for (int i = 0; i < a->n; i++)
    if (strcmp(a->name[i], name) == 0) return a->value[i];
  return NULL;
}

/* Integer attribute into *out; 0, or -1 with ld->err set when missing or malformed. */
static int attr_int(loader *ld, const attrs *a, const char *name, long lo, long hi, int32_t *out) {
  const char *v = attr_get(a, name);
  char *end;
  long x = v ? strtol(v, &end, 0) : 0;
  if (v == NULL || end == v || *end != '\0' || x < lo || x > hi) {
    snprintf(ld->err, sizeof(ld->err), "attribute %s=\"%s\": %s (expected %ld..%ld)", name,
             v ? v : "", v ? "out of range or not a number" : "missing", lo, hi);
    return -1;
  }
  *out = (int32_t)x;
  return 0;
}

static int attr_str(loader *ld, const attrs *a, const char *name, char *out, size_t len) {
  const char *v = attr_get(a, name);
  if (v == NULL || strlen(v) >= len) {
    snprintf(ld->err, sizeof(ld->err), "attribute %s: %s", name, v ? "too long" : "missing");
    return -1;
  }
  snprintf(out, len, "%s", v);
  return 0;
}

static int on_topology(loader *ld, const attrs *a) {
  int32_t version, nranks, nhosts;
  if (ld->sys->nranks > 0) return snprintf(ld->err, sizeof(ld->err), "second weft-topology"), -1;
  if (attr_int(ld, a, "version", 1, 1, &version) || attr_int(ld, a, "nranks", 1, 1 << 20, &nranks) ||
      attr_int(ld, a, "nhosts", 1, nranks, &nhosts))
    return -1;
  ld->sys->hosts = calloc((size_t)nhosts, sizeof(*ld->sys->hosts));
  ld->sys->ranks = calloc((size_t)nranks, sizeof(*ld->sys->ranks));
  ld->seen = calloc((size_t)nranks, 1);
  if (!ld->sys->hosts || !ld->sys->ranks || !ld->seen)
    return snprintf(ld->err, sizeof(ld->err), "out of memory"), -1;
  ld->sys->nranks = nranks;
  ld->sys->nhosts = nhosts;
  return 0;
}

static int on_host(loader *ld, const attrs *a) {
  int32_t idx;
  if (attr_int(ld, a, "index", 0, ld->sys->nhosts - 1, &idx)) return -1;
  weft__topo_host *h = &ld->sys->hosts[idx];
  const char *hash = attr_get(a, "hash");
  char *end;
  h->hash = hash ? strtoull(hash, &end, 0) : 0;
  if (hash == NULL || end == hash || *end != '\0')
    return snprintf(ld->err, sizeof(ld->err), "attribute hash: missing or not a number"), -1;
  ld->cur_host = idx;
  return attr_str(ld, a, "hostname", h->hostname, sizeof(h->hostname)) ||
         attr_str(ld, a, "discovery", h->discovery, sizeof(h->discovery)) ||
         attr_int(ld, a, "packages", 0, 1 << 20, &h->packages) ||
         attr_int(ld, a, "numa-nodes", 0, 1 << 20, &h->numa_nodes) ||
         attr_int(ld, a, "cores", 0, 1 << 20, &h->cores) ||
         attr_int(ld, a, "pus", 0, 1 << 20, &h->pus) ||
         attr_int(ld, a, "l3-caches", 0, 1 << 20, &h->l3_caches) ? -1 : 0;
}

static int on_device(loader *ld, const attrs *a) {
  if (ld->cur_host < 0) return snprintf(ld->err, sizeof(ld->err), "device outside a host"), -1;
  weft__topo_host *h = &ld->sys->hosts[ld->cur_host];
  if (h->ndevices >= WEFT__TOPO_MAX_DEVICES) return 0; /* as discovery: the rest is dropped */
  weft__topo_device *d = &h->devices[h->ndevices];
  if (attr_str(ld, a, "kind", d->kind, sizeof(d->kind)) || attr_str(ld, a, "name", d->name, sizeof(d->name)) ||
      attr_str(ld, a, "pci", d->pci, sizeof(d->pci)) || attr_int(ld, a, "numa", -1, 1 << 20, &d->numa) ||
      attr_int(ld, a, "speed-mbps", -1, 1 << 30, &d->speed_mbps) ||
      (attr_get(a, "path") != NULL && attr_str(ld, a, "path", d->path, sizeof(d->path))))
    return -1;
  h->ndevices++;
  return 0;
}

static int on_rank(loader *ld, const attrs *a) {
  int32_t idx;
  if (attr_int(ld, a, "index", 0, ld->sys->nranks - 1, &idx)) return -1;
  if (ld->seen[idx]) return snprintf(ld->err, sizeof(ld->err), "rank %d given twice", idx), -1;
  ld->seen[idx] = 1;
  weft__topo_rank *r = &ld->sys->ranks[idx];
  const char *cpus = attr_get(a, "cpuset");
  if (cpus == NULL || weft__topo_cpuset_parse(cpus, r->cpuset) != 0)
    return snprintf(ld->err, sizeof(ld->err), "attribute cpuset=\"%s\": malformed", cpus ? cpus : ""), -1;
  return attr_int(ld, a, "host", 0, ld->sys->nhosts - 1, &r->host) ||
         attr_int(ld, a, "numa", -1, 1 << 20, &r->numa) ||
         attr_int(ld, a, "core-group", -1, 1 << 20, &r->core_group) ||
         attr_str(ld, a, "nic", r->nic, sizeof(r->nic)) ||
         attr_int(ld, a, "nic-speed-mbps", -1, 1 << 30, &r->nic_speed_mbps) ||
         attr_int(ld, a, "nic-numa", -1, 1 << 20, &r->nic_numa) ||
         attr_int(ld, a, "pid", 0, 1 << 30, &r->pid) ? -1 : 0;
}

static int on_element(loader *ld, const char *name, const attrs *a) {
  if (strcmp(name, "weft-topology") == 0) return on_topology(ld, a);
  if (ld->sys->nranks == 0) return snprintf(ld->err, sizeof(ld->err), "<%s> before <weft-topology>", name), -1;
  if (strcmp(name, "host") == 0) return on_host(ld, a);
  if (strcmp(name, "device") == 0) return on_device(ld, a);
  if (strcmp(name, "rank") == 0) return on_rank(ld, a);
  return 0;
}

/* Replaces the five predefined entities in place. */
static int unescape(char *s) {
  static const char *ent[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
  static const char chr[] = "&<>\"'";
  char *w = s;
  for (char *p = s; *p;) {
    if (*p != '&') { *w++ = *p++; continue; }
    int k = 0;
    while (k < 5 && strncmp(p, ent[k], strlen(ent[k])) != 0) k++;
    if (k == 5) return -1;
    *w++ = chr[k];
    p += strlen(ent[k]);
  }
  *w = '\0';
  return 0;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Parses the attributes of the tag at *pp (just after its name) up to '>' in place;
 * *pp ends after the '>'. */
static int parse_attrs(loader *ld, char **pp, attrs *a) {
  char *p = *pp;
  a->n = 0;
  for (;;) {
    while (is_space(*p)) { if (*p == '\n') ld->line++; p++; }
    if (*p == '/' && p[1] == '>') { *p = '\0'; *pp = p + 2; return 0; }
    if (*p == '>') { *p = '\0'; *pp = p + 1; return 0; }
    char *name = p;
    while (*p && *p != '=' && !is_space(*p) && *p != '>') p++;
    if (*p != '=' || p[1] != '"' || a->n == MAX_ATTRS)
      return snprintf(ld->err, sizeof(ld->err), "malformed attribute near \"%.20s\"", name), -1;
    *p = '\0';
    char *value = p + 2, *close = strchr(value, '"');
    if (close == NULL) return snprintf(ld->err, sizeof(ld->err), "unterminated value of %s", name), -1;
    *close = '\0';
    if (unescape(value) != 0) return snprintf(ld->err, sizeof(ld->err), "unknown entity in %s", name), -1;
    a->name[a->n] = name;
    a->value[a->n++] = value;
    p = close + 1;
  }
}

/* Skips a comment, declaration or closing tag starting at p ('<'); NULL when unterminated. */
static char *skip_markup(loader *ld, char *p) {
  const char *end = strncmp(p, "<!--", 4) == 0 ? "-->" : ">";
  char *q = strstr(p, end);
  if (q == NULL) return NULL;
  for (char *c = p; c < q; c++) ld->line += *c == '\n';
  return q + strlen(end);
}

static int parse(loader *ld, char *text) {
  ld->line = 1;
  for (char *p = text; *p;) {
    if (*p != '<') { ld->line += *p == '\n'; p++; continue; }
    if (p[1] == '?' || p[1] == '!' || p[1] == '/') {
      if ((p = skip_markup(ld, p)) == NULL) return snprintf(ld->err, sizeof(ld->err), "unterminated markup"), -1;
      continue;
    }
    char *name = ++p;
    while (*p && !is_space(*p) && *p != '>' && *p != '/') p++;
    char saved = *p;
    *p = '\0';
    char namebuf[32];
    snprintf(namebuf, sizeof(namebuf), "%s", name);
    *p = saved;
    int line = ld->line;
    attrs a;
    if (parse_attrs(ld, &p, &a) != 0) return -1;
    int at = ld->line;
    ld->line = line; /* errors name the element's first line */
    if (on_element(ld, namebuf, &a) != 0) return -1;
    ld->line = at;
  }
  return 0;
}

/* After parsing: every rank present, host rank counts and local ranks recomputed. */
static int finish(loader *ld) {
  weft__topo_system *sys = ld->sys;
  if (sys->nranks == 0) return snprintf(ld->err, sizeof(ld->err), "no <weft-topology> element"), -1;
  for (int r = 0; r < sys->nranks; r++) {
    if (!ld->seen[r]) return snprintf(ld->err, sizeof(ld->err), "no <rank index=\"%d\">", r), -1;
    weft__topo_host *h = &sys->hosts[sys->ranks[r].host];
    sys->ranks[r].local_rank = h->nranks++;
  }
  return 0;
}

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return NULL;
  char *buf = malloc(MAX_FILE_BYTES + 1);
  size_t n = buf ? fread(buf, 1, MAX_FILE_BYTES, f) : 0;
  fclose(f);
  if (buf != NULL) buf[n] = '\0';
  *len = n;
  return buf;
}

weft_status_t weft__topo_xml_load(const char *path, weft__topo_system *sys) {
  memset(sys, 0, sizeof(*sys));
  size_t len;
  char *text = read_all(path, &len);
  if (text == NULL)
    return weft__error(NULL, WEFT_ERR_SYSTEM, "topology load: cannot read %s: %s", path, strerror(errno));
  loader ld = {.path = path, .sys = sys, .cur_host = -1};
  int bad = strlen(text) != len ? (snprintf(ld.err, sizeof(ld.err), "NUL byte in file"), -1)
                                : parse(&ld, text);
  if (bad == 0) bad = finish(&ld);
  free(text);
  free(ld.seen);
  if (bad != 0) {
    weft__topo_system_free(sys);
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "topology load: %s:%d: %s", path, ld.line, ld.err);
  }
  snprintf(sys->source, sizeof(sys->source), "%s", path);
  return WEFT_SUCCESS;
}

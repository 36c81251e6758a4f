/* xml.c: the system view as a small XML file, written by weft-topo --dump (or
 * WEFT_TOPO_DUMP_FILE) and read back through WEFT_TOPO_FILE, so a user can inspect or
 * correct what was detected. The format, one element per line:
 *
 *   <?xml version="1.0" encoding="UTF-8"?>
 *   <weft-topology version="1" nranks="2" nhosts="1">
 *     <host index="0" hostname="node1" hash="0x9b1c..." discovery="hwloc"
 *           cpu="GenuineIntel 6/167" packages="1" numa-nodes="1" cores="2" pus="2" l3-caches="1">
 *       (cpu: lib/cpu_key.h's name of the CPU kind, optional: the tuner's fitted rows)
 *       <device kind="nic" name="eth0" pci="0000:00:03.0" numa="0" speed-mbps="-1"/>
 *       <device kind="ib" name="mlx5_0" pci="0000:81:00.0" path="/sys/devices/..." numa="1" .../>
 *       <device kind="gpu" name="" pci="0000:3b:00.0" path="/sys/devices/..." cpus="0-15" .../>
 *       <nvlink a="1" b="2" links="12"/>
 *       (path: the PCI path, optional; cpus: the CPUs local to the device, optional;
 *        nvlink: links between devices a and b (indices among the host's devices), present
 *        only when the host element says nvlink="nvml", which means NVML counted them)
 *     </host>
 *     <rank index="0" host="0" numa="0" core-group="0" cpuset="0-1" nic="eth0"
 *           nic-speed-mbps="-1" nic-numa="0" pid="4242"/>
 *   </weft-topology>
 *
 * numa, core-group, nic-numa and speeds are -1 when unknown; cpuset uses the kernel's list
 * form. A host's rank count and a rank's local rank are not stored: they are recomputed
 * from the rank elements, so moving a rank to another host is a one-attribute edit.
 * Attributes may come in any order; unknown elements and attributes are ignored (newer
 * files stay readable); missing required ones are errors naming the line. This file
 * writes; topo/xml_load.c reads, with libxml2, so any well-formed XML is accepted. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/status.h"
#include "topo/topo.h"


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
  put_str(f, "cpu", h->cpu);
  fprintf(f, " packages=\"%d\" numa-nodes=\"%d\" cores=\"%d\" pus=\"%d\" l3-caches=\"%d\"%s>\n",
          h->packages, h->numa_nodes, h->cores, h->pus, h->l3_caches, h->nvlink_known ? " nvlink=\"nvml\"" : "");
  for (int i = 0; i < h->ndevices; i++) {
    const weft__topo_device *d = &h->devices[i];
    fputs("    <device", f);
    put_str(f, "kind", d->kind);
    put_str(f, "name", d->name);
    put_str(f, "pci", d->pci);
    if (d->path[0] != '\0') put_str(f, "path", d->path);
    char cpus[4096];
    weft__topo_cpuset_str(d->cpus, cpus, sizeof(cpus));
    if (cpus[0] != '\0') put_str(f, "cpus", cpus);
    fprintf(f, " numa=\"%d\" speed-mbps=\"%d\"/>\n", d->numa, d->speed_mbps);
  }
  for (int a = 0; a < h->ndevices && h->nvlink_known; a++)
    for (int b = a + 1; b < h->ndevices; b++)
      if (h->nvlinks[a][b] > 0) fprintf(f, "    <nvlink a=\"%d\" b=\"%d\" links=\"%d\"/>\n", a, b, h->nvlinks[a][b]);
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

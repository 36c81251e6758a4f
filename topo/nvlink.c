/* nvlink.c: NVLinks between the GPUs of this host, from NVML when it is installed.
 *
 * NVML (libnvidia-ml.so.1) comes with NVIDIA's driver; weft never links it or includes its
 * header: it is opened with dlopen at run time and the five calls used are declared here
 * from NVML's documented C ABI. Steps: nvmlInit_v2; for each GPU of the host's device list,
 * nvmlDeviceGetHandleByPciBusId_v2, then for links 0..17 nvmlDeviceGetNvLinkState and, on
 * an active link, nvmlDeviceGetNvLinkRemotePciInfo_v2 names the far end; nvmlShutdown.
 * A far end that is another GPU of the list counts for that pair; any other (an NVSwitch)
 * is a switch link, and two GPUs that both have switch links reach each other through the
 * switches with the fewer of their two counts (every pair of an HGX H100 board: NV18).
 * Without the library, a GPU or an answer from nvmlInit, host->nvlink_known stays 0 and
 * weft-topo says "NVLink: unknown (no NVML)". WEFT_NVML_LIBRARY=PATH opens another file;
 * WEFT_TOPO_NVML=0 skips NVML. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include "lib/env.h"
#include "topo/topo.h"

#define NVML_MAX_LINKS 18 /* NVML_NVLINK_MAX_LINKS */

/* ---- the part of NVML's ABI used (nvml.h, documented by NVIDIA) ---- */
typedef int nvml_return;                 /* nvmlReturn_t: 0 = NVML_SUCCESS */
typedef struct nvml_device *nvml_device; /* nvmlDevice_t: an opaque handle */
typedef struct {                         /* nvmlPciInfo_t (the _v2 calls' layout) */
  char bus_id_legacy[16];                /* "0000:3b:00.0" */
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];                       /* "00000000:3B:00.0" */
} nvml_pci_info;

typedef struct {
  nvml_return (*init)(void);
  nvml_return (*shutdown)(void);
  nvml_return (*handle_by_pci)(const char *, nvml_device *);
  nvml_return (*link_state)(nvml_device, unsigned, int *); /* nvmlEnableState_t: 1 enabled */
  nvml_return (*remote_pci)(nvml_device, unsigned, nvml_pci_info *);
} nvml_fns;

static nvml_fns g_nvml; /* set while weft__topo_discover_nvlink runs (one caller: discovery) */

static int call_handle(const char *pci, void **dev) {
  nvml_device d = NULL;
  int rc = g_nvml.handle_by_pci(pci, &d);
  *dev = d;
  return rc;
}

static int call_active(void *dev, unsigned link, int *active) {
  *active = 0;
  return g_nvml.link_state((nvml_device)dev, link, active);
}

static int call_remote(void *dev, unsigned link, char *bus_id, size_t len) {
  nvml_pci_info info;
  memset(&info, 0, sizeof(info));
  int rc = g_nvml.remote_pci((nvml_device)dev, link, &info);
  info.bus_id[sizeof(info.bus_id) - 1] = info.bus_id_legacy[sizeof(info.bus_id_legacy) - 1] = '\0';
  snprintf(bus_id, len, "%s", info.bus_id[0] ? info.bus_id : info.bus_id_legacy);
  return rc;
}

/* ---- counting (pure, given the calls) ---- */

/* "0000:3b:00.0" and NVML's "00000000:3B:00.0" as one number; 0 when malformed. */
static uint64_t bdf_key(const char *s) {
  unsigned dom, bus, dev, fn;
  if (sscanf(s, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) return 0;
  return ((uint64_t)dom << 24 | bus << 16 | dev << 8 | fn) + 1;
}

static int is_gpu(const weft__topo_device *d) { return strcmp(d->kind, "gpu") == 0; }

/* The GPU of host at bus_id, or -1. */
static int gpu_at(const weft__topo_host *host, const char *bus_id) {
  uint64_t key = bdf_key(bus_id);
  for (int i = 0; key != 0 && i < host->ndevices; i++)
    if (is_gpu(&host->devices[i]) && bdf_key(host->devices[i].pci) == key) return i;
  return -1;
}

/* Links of GPU i: direct[j] to GPU j, the rest through switches (returned). */
static int count_gpu(const weft__topo_host *host, int i, const weft__nvml_calls *nvml, int *direct) {
  void *dev = NULL;
  int switched = 0;
  if (nvml->handle_by_pci(host->devices[i].pci, &dev) != 0) return 0;
  for (unsigned l = 0; l < NVML_MAX_LINKS; l++) {
    int active = 0;
    char bus_id[40];
    if (nvml->link_active(dev, l, &active) != 0 || active != 1) continue;
    if (nvml->link_remote_pci(dev, l, bus_id, sizeof(bus_id)) != 0) continue;
    int j = gpu_at(host, bus_id);
    if (j == i) continue; /* a loopback link: not between two GPUs */
    if (j >= 0) direct[j]++;
    else switched++;
  }
  return switched;
}

void weft__topo_count_nvlinks(weft__topo_host *host, const weft__nvml_calls *nvml) {
  int direct[WEFT__TOPO_MAX_DEVICES][WEFT__TOPO_MAX_DEVICES] = {{0}}, sw[WEFT__TOPO_MAX_DEVICES] = {0};
  memset(host->nvlinks, 0, sizeof(host->nvlinks));
  for (int i = 0; i < host->ndevices; i++)
    if (is_gpu(&host->devices[i]) && host->devices[i].pci[0] != '\0') sw[i] = count_gpu(host, i, nvml, direct[i]);
  for (int i = 0; i < host->ndevices; i++)
    for (int j = 0; j < host->ndevices; j++) {
      if (i == j || !is_gpu(&host->devices[i]) || !is_gpu(&host->devices[j])) continue;
      int n = direct[i][j] > direct[j][i] ? direct[i][j] : direct[j][i]; /* seen from either end */
      n += sw[i] < sw[j] ? sw[i] : sw[j];
      host->nvlinks[i][j] = (uint8_t)(n > 255 ? 255 : n);
    }
  host->nvlink_known = 1;
}

/* ---- loading NVML ---- */

static int resolve(void *h) {
  g_nvml.init = (nvml_return(*)(void))dlsym(h, "nvmlInit_v2");
  g_nvml.shutdown = (nvml_return(*)(void))dlsym(h, "nvmlShutdown");
  g_nvml.handle_by_pci = (nvml_return(*)(const char *, nvml_device *))dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
  g_nvml.link_state = (nvml_return(*)(nvml_device, unsigned, int *))dlsym(h, "nvmlDeviceGetNvLinkState");
  g_nvml.remote_pci =
      (nvml_return(*)(nvml_device, unsigned, nvml_pci_info *))dlsym(h, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  return g_nvml.init && g_nvml.shutdown && g_nvml.handle_by_pci && g_nvml.link_state && g_nvml.remote_pci ? 0 : -1;
}

void weft__topo_discover_nvlink(weft__topo_host *host) {
  int gpus = 0;
  for (int i = 0; i < host->ndevices; i++) gpus += is_gpu(&host->devices[i]);
  if (gpus == 0 || weft__env_long("WEFT_TOPO_NVML", 1) == 0) return;
  const char *lib = weft__env_str("WEFT_NVML_LIBRARY", "libnvidia-ml.so.1");
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) return;
  if (resolve(h) == 0 && g_nvml.init() == 0) {
    static const weft__nvml_calls calls = {call_handle, call_active, call_remote};
    weft__topo_count_nvlinks(host, &calls);
    g_nvml.shutdown();
  }
  memset(&g_nvml, 0, sizeof(g_nvml));
  dlclose(h);
}

/* ib_dev.h: the HCA ports weft may use, and an opened port shared by the connections on it.
 *
 * Discovery (once per process): every device libibverbs (or WEFT_IB_LIBRARY) lists, every
 * port that is ACTIVE with an InfiniBand or Ethernet (RoCE) link layer, kept when
 * WEFT_IB_HCA selects it (ib_config.h); its speed from the port attributes, its GID (index
 * WEFT_IB_GID_INDEX, or chosen: 0 on IB, the first IPv4-mapped one on RoCE), LID, MTU, and
 * from sysfs (ibdev_path/device) its PCI address, PCI path and NUMA node, as NCCL reads them.
 * When nothing is usable (WEFT_IB_DISABLE=1, no library, no device, no active port) one
 * INFO line says why, once.
 *
 * An opened port (weft__ib_dev) holds the verbs context, one protection domain, the
 * asynchronous-event thread and the memory-registration cache; it is reference counted
 * and shared by all connections of the process on that port. Thread-safe. */
#ifndef WEFT_IB_DEV_H
#define WEFT_IB_DEV_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "weft.h"
#include "transports/ib/ibvwrap.h"

#define WEFT__IB_MAX_PORTS 16

typedef struct {
  char name[64];          /* device, "mlx5_0" */
  int port;               /* 1-based */
  int link_ib;            /* 1: InfiniBand, 0: Ethernet (RoCE) */
  int speed_mbps;         /* active speed x width, Mb/s */
  int numa;               /* NUMA node of the PCI function, -1 unknown */
  char pci[16];           /* "0000:81:00.0", "" when not on PCI */
  char pci_path[256];     /* the resolved sysfs directory of the PCI function, "" unknown */
  int gid_index;
  union ibv_gid gid;
  uint16_t lid;
  enum ibv_mtu mtu;       /* active MTU */
} weft__ib_port_info;

/* The usable ports, discovered on the first call. Returns their number (0: the transport is
 * unavailable; *why, when not NULL, says why in a sentence). *ports may be NULL. */
int weft__ib_ports(const weft__ib_port_info **ports, const char **why);
/* Mb/s of an active_speed / active_width pair (0 unknown); for discovery and tests. */
int weft__ib_speed_mbps(int active_speed, int active_width);

typedef struct weft__ib_mr {
  uintptr_t start, end;   /* page-aligned registered range */
  struct ibv_mr *mr;
  int refs;
  struct weft__ib_mr *next;
} weft__ib_mr;

typedef struct weft__ib_dev {
  int index;              /* into weft__ib_ports */
  const weft__ib_port_info *info;
  const weft__ibv *ibv;
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  int refs;
  pthread_mutex_t lock;   /* the MR cache */
  weft__ib_mr *mrs;
  pthread_t async_thread;
  int async_stop;
  pthread_mutex_t event_lock; /* reading async events: the thread or weft__ib_dev_drain_events */
  /* Set by the async thread on an error event; read without the lock after fatal_set. */
  int fatal_set;
  uint32_t fatal_qpn;     /* the QP an affiliated event named; 0: the whole device */
  char fatal[256];
} weft__ib_dev;

/* Opens port index (or takes another reference). Errors: WEFT_ERR_INVALID_ARGUMENT (no such
 * port), WEFT_ERR_SYSTEM (open, PD or thread failed; the message names the device). */
weft_status_t weft__ib_dev_open(int index, weft__ib_dev **out);
void weft__ib_dev_release(weft__ib_dev *d);

/* Reads the events already queued on d's async fd now, without waiting (the async thread
 * does the same when woken). For a flushed completion, whose cause may be an event the
 * thread has not read yet. */
void weft__ib_dev_drain_events(weft__ib_dev *d);
/* The error event of d that concerns QPs qpn[0..n) or the whole device, as a sentence; NULL
 * when none happened. */
const char *weft__ib_dev_fatal(const weft__ib_dev *d, const uint32_t *qpn, int n);

/* The registration cache: registers the pages holding [data, data+size) for local and remote
 * write, or reuses a registration that covers them (NCCL's regMr cache). *out is the handle
 * to pass to the data path and to weft__ib_mr_release. size 0 gives *out = NULL.
 * Errors: WEFT_ERR_SYSTEM (ibv_reg_mr failed; the message names the device and errno),
 * WEFT_ERR_NO_MEMORY. Thread-safe. */
weft_status_t weft__ib_mr_get(weft__ib_dev *d, const void *data, size_t size, weft__ib_mr **out);
void weft__ib_mr_release(weft__ib_dev *d, weft__ib_mr *mr);
#endif

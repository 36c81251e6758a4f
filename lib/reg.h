/* reg.h: buffers registered by one rank (weft_comm_register, as NCCL's ncclCommRegister):
 * local, no collective. A collective whose send and receive buffers this rank registered
 * runs the direct algorithm (algos/direct.h); its descriptor names the registration by
 * what a peer needs to map it (pid, memfd, serial), and each peer keeps what it mapped in
 * a small cache per peer (the imports below), so a buffer used again costs no new mapping.
 * As NCCL requires, if any rank passes registered buffers to a call, every rank must: a
 * rank that does not runs the usual algorithm, and the call fails on every rank (the
 * direct descriptors carry a fingerprint of their own, lib/fingerprint.h, so the usual
 * algorithm's messages and the descriptors never pass for each other), or times out
 * naming the peer. */
#ifndef WEFT_LIB_REG_H
#define WEFT_LIB_REG_H
#include <stddef.h>
#include <stdint.h>
#include "weft.h"
#include "mem/host_adopt.h"
#include "mem/space.h"

struct weft_comm;

struct weft_reg {
  struct weft_comm *comm;
  char *base;             /* the registered buffer */
  size_t bytes;
  int direct;             /* usable for direct collectives (shareable, comm can use it) */
  weft__adopted *adopted; /* plain memory adopted (mem/host_adopt.h), or NULL */
  weft__mem_handle handle; /* what a peer imports: the whole registered buffer */
  uint64_t serial;        /* unique in this process: names this registration to peers */
  struct weft_reg *next;
};

/* The registration of comm, usable for direct collectives, holding [p, p + bytes) here;
 * NULL if none. Caller holds comm->lock. */
struct weft_reg *weft__reg_find(struct weft_comm *comm, const void *p, size_t bytes);
/* Deregisters every registration of comm and unmaps every import (at destroy). */
void weft__reg_free_all(struct weft_comm *comm);

/* A peer's registration as imported here, found or mapped: rank j's registration serial
 * of process pid, whose handle is h. Returns its base here, or NULL with an errno in *err
 * (from the import). Keeps at most WEFT__REG_IMPORTS per peer, the least recently used
 * unmapped first. Caller holds comm->lock (the direct algorithm's progress). */
char *weft__reg_import(struct weft_comm *comm, int j, uint64_t serial, const weft__mem_handle *h, int *err);
#define WEFT__REG_IMPORTS 16
/* How many of peer j's registrations are mapped here (tests). Caller holds comm->lock or
 * knows no call is in flight. */
int weft__reg_imports_held(const struct weft_comm *comm, int j);
#endif

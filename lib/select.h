/* select.h: the tuner's interface beyond weft__select_algo (lib/task.h), for weft-tune and
 * the tests: evaluating the cost model without a communicator, and parsing WEFT_ALGO. */
#ifndef WEFT_SELECT_H
#define WEFT_SELECT_H
#include <stddef.h>
#include "lib/algo.h"

struct weft__transport;

enum { WEFT__SELECT_MAX_CANDIDATES = 5 };

/* What the choice depends on; every field is identical on all ranks of a communicator. */
typedef struct weft__select_input {
  weft__coll_t coll;
  int nranks;
  size_t bytes;        /* count * size: the whole buffer, or per rank (all-gather, all-to-all) */
  /* The transport whose model row the costs use (transports/transport.h): of the links the
   * algorithms cross (across hosts: the slowest). NULL: the registry's first. */
  const struct weft__transport *transport;
  int oversubscribed;  /* more ranks than cores on the one host they share */
  size_t chunk_bytes;  /* the pipeline chunk (WEFT_CHUNK_BYTES) */
  /* The host shape (algos/hier.h); nhosts 0 or 1: one host or unknown, which rules out the
   * hierarchical algorithms. */
  int nhosts;
  int min_local, max_local; /* fewest and most ranks on one host */
  int mem_kind;        /* the user buffers' memory kind (mem/space.h); 0: host */
  /* Two-level algorithms: the transport within a host (NULL: transport) */
  const struct weft__transport *transport_in_host;
  unsigned caps;       /* what every peer's transport can (WEFT__TRANSPORT_CAP_*); 0: unknown */
  /* The CPU of the one host all ranks share (lib/cpu_key.h; its first rank's, from the
   * topology's host record, so the same on all), for a row fitted to it
   * (transports/transport.h); NULL on several hosts or unknown: the stored rows. */
  const char *cpu;
} weft__select_input;

/* Which candidates WEFT_ALGO leaves, per collective: bit i = candidate i allowed. */
typedef struct weft__algo_filter {
  unsigned allowed[WEFT__NUM_COLLS];
  int bad;             /* the string named something unknown (warned once) */
} weft__algo_filter;

/* Parses spec in NCCL_ALGO's grammar into f: "ring,bruck" (only these), "^ring" (all but
 * these), "allreduce:recursive_doubling,ring;allgather:bruck" (per collective; collectives
 * not named keep every candidate). Names are case-insensitive and '_' is ignored.
 * A collective whose list leaves no candidate keeps all of them. NULL or "": no filter.
 * Returns 0 when something was not understood (f is still usable). */
int weft__algo_filter_parse(const char *spec, weft__algo_filter *f);

/* The candidates of coll (their names, in table order); returns how many. */
int weft__select_candidates(weft__coll_t coll, const weft__algo **out, int max);

/* Where a model row comes from, in the order weft__select_model looks. */
typedef enum { WEFT__MODEL_ENV, WEFT__MODEL_FITTED, WEFT__MODEL_STORED } weft__model_source;

/* The model row the costs of tr use: WEFT_TUNER_MODEL's item for tr if it names one, else
 * tr's row fitted to cpu (NULL or "": none), else tr's own .model; *source (may be NULL)
 * says which. tr NULL or unregistered: the registry's first transport. The row stays valid
 * while WEFT_TUNER_MODEL does not change. Thread-safe. */
struct weft__transport_model;
const struct weft__transport_model *weft__select_model(const struct weft__transport *tr, const char *cpu,
                                                      weft__model_source *source);

/* The cost model's estimate in microseconds of algo for in (negative: not modelled). */
double weft__select_cost(const weft__algo *algo, const weft__select_input *in);

/* The choice for in under filter f (NULL: none); *why (may be NULL) gets a short reason.
 * Only rows that handle in->mem_kind count; NULL when none does. */
const weft__algo *weft__select_resolve(const weft__select_input *in, const weft__algo_filter *f,
                                       char *why, size_t whylen);

/* WEFT_TUNER_TRACE is set (read once): log every call's choice. Thread-safe. */
int weft__tuner_trace_on(void);

#endif

/* ib_config.h: the ib transport's environment, in NCCL's grammar (NCCL_IB_* -> WEFT_IB_*).
 *
 *   WEFT_IB_HCA               which HCAs and ports to use, as NCCL_IB_HCA: a comma-separated
 *                             list of NAME[:PORT]; a name matches every device whose name
 *                             starts with it ("mlx5" matches mlx5_0 and mlx5_1); a leading
 *                             '=' asks for exact names; a leading '^' (before the '=')
 *                             excludes the listed ones instead ("^=mlx5_1:2"). Unset: all.
 *   WEFT_IB_GID_INDEX         GID table index on RoCE ports; default -1: the first
 *                             IPv4-mapped GID (RoCE v2 over IPv4), else 0. IB ports use 0.
 *   WEFT_IB_TIMEOUT           the QP's local ACK timeout exponent: 4.096 us * 2^N, 1..31,
 *                             default 20 (4.3 s), as NCCL_IB_TIMEOUT
 *   WEFT_IB_RETRY_CNT         transport retries before an error, 0..7, default 7
 *   WEFT_IB_QPS_PER_CONNECTION queue pairs per connection, 1..8, default 1; a message is split
 *                             over them in 128-byte-aligned chunks
 *   WEFT_IB_DISABLE           1: do not use the ib transport
 * A malformed value is reported (one WARN line naming the variable) and its default used. */
#ifndef WEFT_IB_CONFIG_H
#define WEFT_IB_CONFIG_H
#include <stddef.h>

#define WEFT__IB_MAX_HCA_ENTRIES 32
#define WEFT__IB_MAX_QPS 8

typedef struct {
  char name[64];
  int port;                 /* -1: every port */
} weft__ib_hca_entry;

typedef struct {
  int exclude;              /* '^': the entries are excluded */
  int exact;                /* '=': names match exactly, not as prefixes */
  int n;                    /* 0: every device and port */
  weft__ib_hca_entry e[WEFT__IB_MAX_HCA_ENTRIES];
} weft__ib_hca_list;

typedef struct {
  weft__ib_hca_list hca;
  int gid_index;            /* -1: automatic */
  int timeout;
  int retry_cnt;
  int qps_per_conn;
  int disable;
} weft__ib_config;

/* Parses a WEFT_IB_HCA value (NULL or "" gives the empty list). 0, or -1 with *out empty
 * and err (len bytes) saying what is wrong. Pure; thread-safe. */
int weft__ib_hca_parse(const char *s, weft__ib_hca_list *out, char *err, size_t len);
/* 1 when device dev, port port (1-based) is to be used under l. Pure; thread-safe. */
int weft__ib_hca_match(const weft__ib_hca_list *l, const char *dev, int port);

/* Fills *c from the variables that get(name) returns (NULL: unset); a malformed one keeps
 * its default and is described in err (len bytes, one sentence per variable, "" when all
 * are well formed). Returns how many were malformed. Pure given get; for tests. */
int weft__ib_config_parse(weft__ib_config *c, const char *(*get)(const char *name), char *err,
                          size_t len);
/* The process's configuration from its environment, read once (thread-safe); malformed
 * variables are warned about then. */
const weft__ib_config *weft__ib_config_get(void);
#endif

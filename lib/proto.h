/* proto.h: which protocol a message of a given size takes on a transport that has more
 * than one (today shm: LL for small messages, Simple = the bulk FIFO for the rest), and the
 * WEFT_PROTO override, in NCCL_PROTO's grammar.
 *
 * WEFT_PROTO is a comma-separated list of protocols to allow ("LL", "Simple"), or of
 * protocols to forbid when it starts with '^' ("^LL"); names are case-insensitive, and
 * "LL128" is accepted as another name of weft's LL (whose 64-byte lines with an in-line
 * flag are LL128's idea). Unknown names and a list that leaves no protocol are errors.
 * With both allowed, messages of at most WEFT_LL_THRESHOLD bytes (default below, measured)
 * go LL; with only LL, every message does (cut into 1792-byte chunks); with only Simple, none. */
#ifndef WEFT_PROTO_H
#define WEFT_PROTO_H
#include <stddef.h>
#include <stdint.h>
#include "weft.h"

struct weft_comm;

enum { WEFT__PROTO_LL = 1u << 0, WEFT__PROTO_SIMPLE = 1u << 1, WEFT__PROTO_ALL = 3u };

/* The default LL threshold in bytes, measured on the 2-core VM (2 ranks, float sum
 * all-reduce and sendrecv p50, WEFT_PROTO=LL against Simple, 3 interleaved rounds under
 * chrt -f so other helpers' load stayed off the ranks; the command is in
 * transports/shm/bench_proto.sh's header). Quieter run: LL 0.34-0.36 us against Simple
 * 0.36-0.49 us at 8-128 B, a tie at 256 B, behind from 512 B (0.48-0.51 against
 * 0.44-0.45) and 2x behind from 2 KiB (a flag per 56 bytes, polled line by line). Loaded
 * run: a tie (within 0.04 us) at 8-128 B, LL behind from 256 B. Hence 128, until the bulk
 * path's extra cost moved: since a send rings its peer without a fence (shm_membarrier.h),
 * LL's lines won at 256-512 B too, on the Intel VM of 2026-11-27 (perf/compare, 2 ranks,
 * 7 alternating rounds, mean time per call, 512 against 128): all-reduce 256 B 0.82 / 1.00
 * us, 512 B 0.96 / 1.09; all-gather 512 B 0.80 / 0.99, 1 KiB 0.90 / 1.08 (256 and 512 B
 * messages); 1-2 KiB messages a tie. Hence 512. Not with more ranks than cores, where
 * senders keep their fences (shm_membarrier.h): 4 ranks on 2 cores, 7 rounds, all-reduce
 * 256 B 9.17 / 6.63 us and 512 B 10.5 / 6.76 with 512 against 128 (broadcast 1.3-1.4x
 * faster, the rest a tie), so 128 there. */
#define WEFT__LL_DEFAULT_THRESHOLD 512u
#define WEFT__LL_OVERSUB_THRESHOLD 128u

/* Parses spec (NULL or "" = everything allowed) into a mask of WEFT__PROTO_* bits. Returns
 * 0, or -1 with a message in err naming the bad part. */
int weft__proto_parse(const char *spec, unsigned *mask, char *err, size_t errlen);

/* What this process's environment says: *ll_on and *ll_max (messages of bytes <= ll_max go
 * LL when ll_on). Errors (WEFT_ERR_INVALID_ARGUMENT) name the rank and the variable. */
weft_status_t weft__proto_config(struct weft_comm *comm, int *ll_on, uint64_t *ll_max);

/* "LL" or "Simple" for a message of bytes under (ll_on, ll_max). */
const char *weft__proto_name(int ll_on, uint64_t ll_max, size_t bytes);
#endif

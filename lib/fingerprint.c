/* fingerprint.c: building, describing and reporting call fingerprints (fingerprint.h). */
#include <stdio.h>
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/fingerprint.h"
#include "lib/status.h"
#include "lib/task.h"

static int is_reduction(int coll) {
  return coll == WEFT__COLL_ALL_REDUCE || coll == WEFT__COLL_REDUCE || coll == WEFT__COLL_REDUCE_SCATTER;
}

weft__fp weft__fp_make(int coll, uint64_t seq, size_t count, weft_datatype_t dtype,
                       weft_redop_t op, int root) {
  weft__fp fp;
  /* all_to_allv's counts are per pair and differ between ranks by design: each message's
   * size is checked against the receiver's recvcounts entry instead. */
  fp.count = coll == WEFT__COLL_ALL_TO_ALLV ? 0 : count;
  fp.seq = (uint32_t)seq;
  fp.root = (uint16_t)(root + 1);
  fp.coll = (uint8_t)(coll + 1);
  fp.type = (uint8_t)((unsigned)dtype & 15u) | (uint8_t)(is_reduction(coll) ? ((unsigned)op & 15u) << 4 : 0);
  return fp;
}

const char *weft__fp_describe(const weft__fp *fp, int is_send, int other, char *buf, size_t len) {
  int coll = fp->coll - 1;
  if (coll == WEFT__COLL_SEND) {
    snprintf(buf, len, "%s #%u %s rank %d (%llu bytes)", is_send ? "send" : "recv", fp->seq,
             is_send ? "to" : "from", other, (unsigned long long)fp->count);
    return buf;
  }
  if (coll == WEFT__COLL_BARRIER) {
    snprintf(buf, len, "barrier #%u", fp->seq);
    return buf;
  }
  int n = snprintf(buf, len, "%s #%u (count %llu, %s", weft__coll_name((weft__coll_t)coll), fp->seq,
                   (unsigned long long)fp->count, weft__dtype_name((weft_datatype_t)(fp->type & 15)));
  if (n > 0 && (size_t)n < len && is_reduction(coll))
    n += snprintf(buf + n, len - (size_t)n, ", %s", weft__op_name((weft_redop_t)((fp->type >> 4) & 7u)));
  if (n > 0 && (size_t)n < len && fp->root != 0)
    n += snprintf(buf + n, len - (size_t)n, ", root %d", fp->root - 1);
  if (n > 0 && (size_t)n < len && (fp->type & WEFT__FP_DIRECT))
    n += snprintf(buf + n, len - (size_t)n, ", direct: registered buffers");
  if (n > 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, ")");
  return buf;
}

weft_status_t weft__fp_mismatch(struct weft_comm *comm, int peer, const weft__fp *mine,
                                const weft__fp *theirs) {
  char a[160], b[160];
  weft__fp m = *mine, th = *theirs;
  m.type &= (uint8_t)~WEFT__FP_DIRECT;
  th.type &= (uint8_t)~WEFT__FP_DIRECT;
  if (weft__fp_equal(&m, &th)) { /* the same call; one side went direct (lib/reg.h) */
    int mine_direct = (mine->type & WEFT__FP_DIRECT) != 0;
    return weft__error(comm, WEFT_ERR_INVALID_USAGE,
                       "rank %d: call mismatch: %s on %s buffers does not match rank %d's on %s ones "
                       "(weft_comm_register: as NCCL requires, every rank must pass registered buffers or none)",
                       comm->rank, weft__fp_describe(&m, 0, peer, a, sizeof(a)),
                       mine_direct ? "registered" : "unregistered", peer, mine_direct ? "unregistered" : "registered");
  }
  return weft__error(comm, WEFT_ERR_INVALID_USAGE,
                     "rank %d: call mismatch: %s does not match rank %d's %s (the ranks called different "
                     "operations, or the same in another order)",
                     comm->rank, weft__fp_describe(mine, 0, peer, a, sizeof(a)), peer,
                     weft__fp_describe(theirs, 1, comm->rank, b, sizeof(b)));
}

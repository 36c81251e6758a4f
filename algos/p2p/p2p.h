/* p2p/p2p.h: which sends of a group are one side of an exchange (weft__req.p2p_exchange),
 * and so may move by one copy as all-to-all's messages do (lib/req.c has the figures). */
#ifndef WEFT_ALGOS_P2P_H
#define WEFT_ALGOS_P2P_H
#include <stdint.h>
#include "lib/task.h"

/* The bytes [lo, hi) that a group's receives from other ranks span; lo == hi when it
 * receives nothing from them. */
typedef struct {
  uintptr_t lo, hi;
} weft__p2p_span;

/* The span of the receives among ops[0 .. nops) (a group's sends and receives, rank self's)
 * from ranks other than self; empty receives do not count. Pure; thread safety: any. */
weft__p2p_span weft__p2p_recv_span(const weft__p2p_op *ops, int nops, int self);

/* 1 when send (one of ops, to another rank) is one side of an exchange: the group receives
 * from another rank (span: weft__p2p_recv_span of the same ops), and none of those receives
 * writes into the bytes send reads; 0 otherwise, an in-place sendrecv included (one copy
 * would read the message after its rank's receive had written there). A send outside the
 * span is checked in O(1); one inside it against each receive, so a group costs O(nops)
 * unless its sends and receives interleave in memory. Pure; thread safety: any. */
int weft__p2p_send_in_exchange(const weft__p2p_op *ops, int nops, int self, const weft__p2p_op *send,
                               weft__p2p_span span);

#endif

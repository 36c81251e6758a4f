/* check.h: WEFT_CHECK=1, the opt-in full check of every collective's arguments across all
 * ranks (the always-on check is lib/fingerprint.h's). */
#ifndef WEFT_CHECK_H
#define WEFT_CHECK_H
#include "weft.h"

struct weft__task;

/* Before collective t runs (comm->lock held, comm->call set): every rank sends every other
 * its call's fingerprint (and for all_to_allv the counts of the pair) and compares what it
 * receives, so every rank whose call differs from any other's fails, each naming a peer
 * and both calls. Costs one 32-byte message to and from every peer per call.
 * Errors: WEFT_ERR_INVALID_USAGE (a mismatch), WEFT_ERR_NO_MEMORY, and those of any wait
 * (WEFT_ERR_TIMEOUT naming the peer that never sent, WEFT_ERR_REMOTE, WEFT_ERR_ABORTED);
 * after an error the communicator is broken. */
weft_status_t weft__check_call(struct weft__task *t);
#endif

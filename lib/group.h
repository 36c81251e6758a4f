/* group.h: weft_group_start/end bookkeeping (per thread). */
#ifndef WEFT_GROUP_H
#define WEFT_GROUP_H
#include "weft.h"
#include "lib/task.h"

/* 1 between weft_group_start and its matching weft_group_end on this thread. */
int weft__group_active(void);
/* Records t (ownership passes) to launch at the outermost weft_group_end. */
weft_status_t weft__group_add(weft__task *t, weft_stream_t stream);
/* Remembers that a call inside the group failed: weft_group_end then discards the group. */
void weft__group_fail(weft_status_t st);
/* Runs t now (NULL stream) or queues it (stream), outside any group. Takes ownership. */
weft_status_t weft__launch_now(weft__task *t, weft_stream_t stream);
#endif

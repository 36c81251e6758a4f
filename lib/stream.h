/* stream.h: handing tasks to a stream's progress thread. */
#ifndef WEFT_STREAM_H
#define WEFT_STREAM_H
#include "weft.h"
#include "lib/task.h"

/* Queues t on s; the stream's thread runs and frees it. Counts it in t->comm->pending. */
void weft__stream_enqueue(weft_stream_t s, weft__task *t);
#endif

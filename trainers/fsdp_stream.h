/* trainers/fsdp_stream.h: one weft stream plus the clock that says how long it was busy and
 * how long the trainer waited for it.
 *
 * weft-train-fsdp puts every all-gather and reduce-scatter of a step on ONE stream, so all
 * ranks issue the collectives of the communicator in the same order (two streams on one
 * communicator would race for it). weft_stream_synchronize waits for everything queued,
 * so the trainer orders its enqueues such that "wait for all" is what it needs (fsdp_step.h).
 *
 * Comm time is the time the stream held work (first enqueue to drain, summed over busy
 * spans), measured by a watcher thread that sleeps in weft_stream_synchronize and notes
 * when the stream drains (as ddp_reducer.h does). Exposed comm is the time the trainer
 * itself waited in fsdp_stream_wait. Comm time includes waiting for a slower peer to reach
 * the same collective; exposed time includes the watcher's wake-up (tens of microseconds).
 */
#ifndef WEFT_TRAINERS_FSDP_STREAM_H
#define WEFT_TRAINERS_FSDP_STREAM_H

#include <pthread.h>
#include <weft.h>

typedef struct fsdp_stream {
  weft_stream_t stream;
  pthread_t watcher;
  int watcher_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  long enqueued, drained; /* operations handed to the stream / known complete */
  int stop;
  double busy_since;         /* when the stream last went from idle to busy */
  double busy_s, exposed_s;  /* since fsdp_stream_reset */
  weft_status_t error;       /* first error the watcher saw, until fsdp_stream_wait returns it */
} fsdp_stream;

/* Creates the stream and its watcher; returns -1 with the reason in err. */
int fsdp_stream_init(fsdp_stream *s, char *err, size_t errlen);
void fsdp_stream_free(fsdp_stream *s);

/* Call just before enqueuing an operation on s->stream, and fsdp_stream_enqueued just
 * after it was accepted. */
void fsdp_stream_begin_op(fsdp_stream *s);
void fsdp_stream_enqueued(fsdp_stream *s);

/* Waits until every enqueued operation is complete (their own deadlines bound it) and adds
 * the wait to the exposed time. Returns the first error of those operations. */
weft_status_t fsdp_stream_wait(fsdp_stream *s);

/* Reads the busy and exposed times since the last reset, and resets them. Call it when
 * the stream is idle (after fsdp_stream_wait). */
void fsdp_stream_take_times(fsdp_stream *s, double *busy_s, double *exposed_s);

#endif

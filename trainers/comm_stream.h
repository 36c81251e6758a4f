/* trainers/comm_stream.h: one weft stream plus the clock that says how long it was busy and
 * how long the trainer waited for it; the overlapped communication of weft-train-ddp
 * (ddp_reducer.h) and weft-train-fsdp (fsdp_step.h) runs on one each.
 *
 * A trainer puts every collective of a step on ONE stream, so all ranks issue the
 * collectives of the communicator in the same order (two streams on one communicator
 * would race for it). weft_stream_synchronize waits for everything queued, so the trainer
 * orders its enqueues such that "wait for all" is what it needs.
 *
 * Comm time is the time the stream held work (first enqueue to drain, summed over busy
 * spans), measured by a watcher thread that sleeps in weft_stream_synchronize and notes
 * when the stream drains. Exposed comm is the time the trainer itself waited in
 * gpt_comm_stream_wait. Comm time includes waiting for a slower peer to reach the same
 * collective; exposed time includes the watcher's wake-up (tens of microseconds), so when
 * nothing overlaps it can exceed comm time by that much.
 */
#ifndef WEFT_TRAINERS_COMM_STREAM_H
#define WEFT_TRAINERS_COMM_STREAM_H

#include <pthread.h>
#include <weft.h>

typedef struct gpt_comm_stream {
  weft_stream_t stream;
  pthread_t watcher;
  int watcher_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  long enqueued, drained; /* operations handed to the stream / known complete */
  int stop;
  double busy_since;         /* when the stream last went from idle to busy */
  double busy_s, exposed_s;  /* since the last gpt_comm_stream_take_times */
  weft_status_t error;       /* first error the watcher saw, until gpt_comm_stream_wait returns it */
} gpt_comm_stream;

/* Creates the stream and its watcher; returns -1 with the reason in err. */
int gpt_comm_stream_init(gpt_comm_stream *s, char *err, size_t errlen);
void gpt_comm_stream_free(gpt_comm_stream *s);

/* Call just before enqueuing an operation on s->stream, and gpt_comm_stream_enqueued just
 * after it was accepted. */
void gpt_comm_stream_begin_op(gpt_comm_stream *s);
void gpt_comm_stream_enqueued(gpt_comm_stream *s);

/* Waits until every enqueued operation is complete (their own deadlines bound it) and adds
 * the wait to the exposed time. Returns the first error of those operations. */
weft_status_t gpt_comm_stream_wait(gpt_comm_stream *s);

/* Reads the busy and exposed times since the last reset, and resets them. Call it when
 * the stream is idle (after gpt_comm_stream_wait). */
void gpt_comm_stream_take_times(gpt_comm_stream *s, double *busy_s, double *exposed_s);

#endif

/* weft_tune_measure.h: weft-tune --measure (see weft_tune_measure.c). */
#ifndef WEFT_TOOLS_TUNE_MEASURE_H
#define WEFT_TOOLS_TUNE_MEASURE_H
#include <stddef.h>
/* Measures the tuner's model on this machine with the perf programs beside this executable
 * and prints it as an `export WEFT_TUNER_MODEL=...` line. Returns the exit status (0 or 1). */
int weft_tune_measure(size_t chunk_bytes);
#endif

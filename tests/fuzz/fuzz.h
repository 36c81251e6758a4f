/* fuzz.h: what every fuzz target of tests/fuzz/ shares.
 *
 * Each fuzz_*.c defines LLVMFuzzerTestOneInput, libFuzzer's entry: `make fuzz` links it
 * with clang's -fsanitize=fuzzer (plus ASan and UBSan) and runs it; the normal suite links
 * the same file with replay.c, a plain main that feeds it the seed files of
 * tests/fuzz/seeds/<target>/ (so the targets keep compiling and the seeds keep passing).
 * A target aborts on a property it checks (a round trip that does not give back its input):
 * both drivers report an abort as a failure. */
#ifndef WEFT_TESTS_FUZZ_H
#define WEFT_TESTS_FUZZ_H
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Once per process: weft's warnings off (every rejected input would print one), SIGPIPE
 * ignored (the targets write to sockets whose reader is gone). */
void fuzz_setup_once(void);

/* A NUL-terminated malloc'd copy of data[0..size) (cut at the first NUL). */
char *fuzz_strndup(const uint8_t *data, size_t size);

/* Aborts with a message when cond is false: a property of the parser that failed. */
#define FUZZ_CHECK(cond, what) \
  do {                         \
    if (!(cond)) fuzz_fail(__FILE__, __LINE__, what); \
  } while (0)
void fuzz_fail(const char *file, int line, const char *what) __attribute__((noreturn));
#endif

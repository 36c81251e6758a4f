/* env.h: reading weft's environment variables. Every variable weft reads is listed in the
 * README; parse errors are warned about once and the default is used. */
#ifndef WEFT_ENV_H
#define WEFT_ENV_H
#include <stddef.h>
#include <stdint.h>
#include "weft.h"

/* The integer value of variable name, or def when unset or malformed (then warns). */
long weft__env_long(const char *name, long def);
/* A size with an optional K/M/G suffix (powers of 1024), or def. */
size_t weft__env_size(const char *name, size_t def);
/* Strict parsers of one value (no side effects, no logging; for fuzzing too). Each
 * returns 0 with *out set, or -1 when text is not entirely the thing asked for (no sign,
 * no blanks, no trailing characters) or does not fit.
 * weft__parse_long: decimal or 0x hex, optional leading '-', within long.
 * weft__parse_size: decimal or 0x hex with an optional K/M/G suffix (powers of 1024),
 *                   no '-', the result within size_t.
 * weft__parse_hex: exactly 2 * n hex digits into n bytes.
 * weft__parse_port: decimal 1..65535. */
int weft__parse_long(const char *text, long *out);
int weft__parse_size(const char *text, size_t *out);
int weft__parse_hex(const char *text, uint8_t *out, size_t n);
int weft__parse_port(const char *text, uint16_t *out);

/* Range-checked reads for values a wrong setting would make dangerous (a timeout cut to
 * 1 ms by a cast, a socket buffer too small to move data): def when unset or empty; a
 * malformed value or one outside [min, max] is WEFT_ERR_INVALID_USAGE with a message
 * naming the variable, its value and the valid range (no fallback: it fails where it is
 * set, not later). Thread-safe. */
weft_status_t weft__env_long_in(const char *name, long def, long min, long max, long *out);
/* As above for sizes; 0 is also accepted when zero_ok (it means "the default"). */
weft_status_t weft__env_size_in(const char *name, size_t def, size_t min, size_t max, int zero_ok,
                                size_t *out);
/* WEFT_TIMEOUT_MS: 1 ms .. 24 days (INT_MAX ms), default 120000. */
weft_status_t weft__env_timeout_ms(int *out);

/* The string value, or def when unset or empty. */
const char *weft__env_str(const char *name, const char *def);
/* The variable to read for name, which replaced old: name when it is set or old is not,
 * else old, with a warning (once per process and name) that old is deprecated. For renamed
 * variables: weft__env_long(weft__env_name("WEFT_NEW", "WEFT_OLD"), def). Thread-safe. */
const char *weft__env_name(const char *name, const char *old);
#endif

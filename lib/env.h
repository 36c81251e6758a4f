/* env.h: reading weft's environment variables. Every variable weft reads is listed in the
 * README; parse errors are warned about once and the default is used. */
#ifndef WEFT_ENV_H
#define WEFT_ENV_H
#include <stddef.h>
#include <stdint.h>

/* The integer value of variable name, or def when unset or malformed (then warns). */
long weft__env_long(const char *name, long def);
/* A size with an optional K/M/G suffix (powers of 1024), or def. */
size_t weft__env_size(const char *name, size_t def);
/* The string value, or def when unset or empty. */
const char *weft__env_str(const char *name, const char *def);
/* The variable to read for name, which replaced old: name when it is set or old is not,
 * else old, with a warning (once per process and name) that old is deprecated. For renamed
 * variables: weft__env_long(weft__env_name("WEFT_NEW", "WEFT_OLD"), def). Thread-safe. */
const char *weft__env_name(const char *name, const char *old);
#endif

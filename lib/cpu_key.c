/* cpu_key.c: this host's CPU kind from cpuid, for the tuner's rows fitted per machine kind. */
#include "lib/cpu_key.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static char key[48];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void read_key(void) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  char vendor[13];
  if (!__get_cpuid(0, &a, &b, &c, &d)) return;
  memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4);
  vendor[12] = '\0';
  if (!__get_cpuid(1, &a, &b, &c, &d)) return;
  /* Display family and model (Intel SDM vol. 2A, CPUID 01H, figure 3-6; AMD's the same): the
   * extended family adds to family 15, the extended model prefixes families 6 and 15 up. */
  unsigned family = (a >> 8) & 0xf, model = (a >> 4) & 0xf;
  if (family == 0xf) family += (a >> 20) & 0xff;
  if (family == 0x6 || family >= 0xf) model += ((a >> 16) & 0xf) << 4;
  snprintf(key, sizeof key, "%s %u/%u", vendor, family, model);
#endif
}

const char *weft__cpu_key(void) {
  pthread_once(&once, read_key);
  return key;
}

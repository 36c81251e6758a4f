/* host.c: which ranks share a host. Two processes can share memory through the shm transport
 * (memfd handed over an abstract Unix socket) only if they run on the same kernel (boot id)
 * and in the same network namespace (abstract sockets are per namespace). Hostnames are not
 * enough: containers and the network namespaces used to emulate hosts share or fake them.
 * WEFT_HOSTID overrides the identity, for tests and odd setups. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "lib/comm.h"
#include "lib/env.h"

/* FNV-1a, 64 bit: a small stable hash; collisions would only merge hosts by mistake with
 * probability 2^-64 per pair. */
static uint64_t fnv1a(uint64_t h, const void *data, size_t len) {
  const unsigned char *p = data;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t weft__host_hash(char *hostname, size_t len) {
  if (hostname != NULL && len > 0) {
    hostname[0] = '\0';
    gethostname(hostname, len - 1);
    hostname[len - 1] = '\0';
  }
  uint64_t h = 14695981039346656037ull;
  const char *override = weft__env_str("WEFT_HOSTID", NULL);
  if (override != NULL) return fnv1a(h, override, strlen(override));
  char boot_id[64] = "";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f != NULL) {
    if (fgets(boot_id, sizeof(boot_id), f) == NULL) boot_id[0] = '\0';
    fclose(f);
  }
  h = fnv1a(h, boot_id, strlen(boot_id));
  struct stat st;
  if (stat("/proc/self/ns/net", &st) == 0) h = fnv1a(h, &st.st_ino, sizeof(st.st_ino));
  if (boot_id[0] == '\0' && hostname != NULL) h = fnv1a(h, hostname, strlen(hostname));
  return h;
}

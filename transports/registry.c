/* registry.c: the transports the core may choose from (transports/transport.h), in order
 * of precedence when two prefer a pair equally. A new transport adds its entry point here
 * and its folder to transports/Makefile.inc; nothing else of the core changes. */
#include <string.h>
#include "topo/topo.h"
#include "transports/transport.h"

extern const weft__transport weft__transport_shm;
extern const weft__transport weft__transport_socket;
#ifdef WEFT_HAVE_IBVERBS
extern const weft__transport weft__transport_ib; /* transports/ib/: built with the verbs headers */
#endif

const weft__transport *const weft__transports[] = {
    &weft__transport_shm,
    &weft__transport_socket,
#ifdef WEFT_HAVE_IBVERBS
    &weft__transport_ib,
#endif
    NULL,
};

_Static_assert(sizeof weft__transports / sizeof weft__transports[0] <= WEFT__MAX_TRANSPORTS + 1,
               "raise WEFT__MAX_TRANSPORTS");

const weft__transport *weft__transport_by_name(const char *name) {
  for (int i = 0; weft__transports[i] != NULL; i++)
    if (strcmp(weft__transports[i]->name, name) == 0) return weft__transports[i];
  return NULL;
}

int weft__transport_index(const weft__transport *tr) {
  for (int i = 0; weft__transports[i] != NULL; i++)
    if (weft__transports[i] == tr) return i;
  return -1;
}

const weft__transport *weft__transport_choose(const weft__topo_system *topo, int a, int b,
                                              const weft__transport *forced) {
  if (forced != NULL) return forced->can_connect(topo, a, b) > 0 ? forced : NULL;
  const weft__transport *best = NULL;
  int best_pref = 0;
  for (int i = 0; weft__transports[i] != NULL; i++) {
    int pref = weft__transports[i]->can_connect(topo, a, b);
    if (pref > best_pref) best = weft__transports[i], best_pref = pref;
  }
  return best;
}

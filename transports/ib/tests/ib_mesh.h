/* ib_mesh.h: N test processes joined pairwise by the ib engine (transports/ib/ib_net.h), both
 * directions, through handles moved in a shared mailbox; and a checked all-pairs exchange.
 * For tests/test_ib_engine.c. */
#ifndef WEFT_TESTS_IB_MESH_H
#define WEFT_TESTS_IB_MESH_H
#include <stdatomic.h>
#include "tests/harness.h"
#include "transports/ib/ib_net.h"

#define IB_MESH_MAX 8

typedef struct {
  weft__ib_handle listen[IB_MESH_MAX];
  weft__ib_handle conn[IB_MESH_MAX][IB_MESH_MAX];  /* [sender][receiver] */
  weft__ib_handle acc[IB_MESH_MAX][IB_MESH_MAX];   /* [receiver][sender] */
  atomic_int have_listen[IB_MESH_MAX], have_conn[IB_MESH_MAX][IB_MESH_MAX], have_acc[IB_MESH_MAX][IB_MESH_MAX];
  atomic_int failed[IB_MESH_MAX];                  /* rank r gave up setting up */
} ib_mailbox;

typedef struct {
  ib_mailbox *mailbox;  /* shared by the processes (MAP_SHARED before the fork) */
  uint8_t secret[16];
  void *user;
} ib_mesh_arg;

typedef struct {
  int n, me, timeout_ms;
  char self[16], peer[IB_MESH_MAX][16];
  weft__ib_listen_comm *lc;
  weft__ib_send_comm *sc[IB_MESH_MAX];
  weft__ib_recv_comm *rc[IB_MESH_MAX];
} ib_mesh;

ib_mailbox *ib_mailbox_new(void);
void ib_mailbox_free(ib_mailbox *m);
/* harness_run of n processes without a communicator; r->arg is an ib_mesh_arg whose user is
 * user. */
void ib_mesh_run(int n, harness_body_fn body, void *user, int deadline_s);
/* Connects this rank to every other, port 0, comms' timeout timeout_ms. 0, or -1 after
 * harness_fail (the _quiet form does not count the failure: weft_get_last_error says it). */
int ib_mesh_setup(harness_rank *r, ib_mesh *m, int timeout_ms);
int ib_mesh_setup_quiet(harness_rank *r, ib_mesh *m, int timeout_ms);
/* Every rank sends `size` bytes to every other and receives from each; checks the bytes (a
 * pattern of sender, receiver, size and iter), the received size, and that the 64 bytes
 * posted beyond size were not written. An error of the engine is returned (not counted); a
 * wrong byte is counted with harness_fail. Deadline: deadline_ms for the whole exchange. */
weft_status_t ib_mesh_exchange(harness_rank *r, ib_mesh *m, size_t size, int iter, int deadline_ms);
/* The same with this rank sending send_bytes and posting receives of recv_bytes + 64. */
weft_status_t ib_mesh_exchange_sizes(harness_rank *r, ib_mesh *m, size_t send_bytes, size_t recv_bytes,
                                     int iter, int deadline_ms);
void ib_mesh_close(ib_mesh *m);
#endif

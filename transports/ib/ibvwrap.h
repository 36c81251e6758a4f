/* ibvwrap.h: libibverbs, loaded at run time through a table of function pointers (the
 * idea of NCCL's ibvwrap), so that libweft loads, and every other transport runs, on
 * machines without libibverbs or an RDMA device.
 *
 * WEFT_IB_LIBRARY names the library to load instead (a path, e.g. the verbs emulator of
 * the tests, build/tests/verbs_emu/.libs/libweft_verbs_emu.so); default libibverbs.so.1,
 * then libibverbs.so. No LD_PRELOAD is involved.
 *
 * ibv_poll_cq, ibv_post_send and ibv_post_recv are static inlines in verbs.h that call the
 * provider through ibv_context.ops; weft calls them the same way (weft__ibv_poll_cq and
 * friends below), and the emulator fills those ops as a provider does.
 * ibv_query_port is called through the library's exported symbol (the compat entry point
 * whose attribute layout is a prefix of struct ibv_port_attr), after zeroing the rest. */
#ifndef WEFT_IB_IBVWRAP_H
#define WEFT_IB_IBVWRAP_H
#include <stddef.h>
#include <infiniband/verbs.h>

typedef struct weft__ibv {
  void *handle;
  char path[256];                          /* what was loaded */
  struct ibv_device **(*get_device_list)(int *num);
  void (*free_device_list)(struct ibv_device **list);
  const char *(*get_device_name)(struct ibv_device *dev);
  struct ibv_context *(*open_device)(struct ibv_device *dev);
  int (*close_device)(struct ibv_context *ctx);
  int (*get_async_event)(struct ibv_context *ctx, struct ibv_async_event *ev);
  void (*ack_async_event)(struct ibv_async_event *ev);
  int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
  int (*query_port_compat)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
  int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
  int (*dealloc_pd)(struct ibv_pd *pd);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
  int (*dereg_mr)(struct ibv_mr *mr);
  struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_context,
                              struct ibv_comp_channel *channel, int comp_vector);
  int (*destroy_cq)(struct ibv_cq *cq);
  struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
  int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
  int (*destroy_qp)(struct ibv_qp *qp);
  const char *(*wc_status_str)(enum ibv_wc_status status);
  const char *(*event_type_str)(enum ibv_event_type type);
} weft__ibv;

/* The loaded table, loading it on the first call (thread-safe; loaded once per process,
 * never unloaded). NULL when the library cannot be loaded or lacks a symbol; then *why (if
 * not NULL) points at a static sentence saying which library and why. */
const weft__ibv *weft__ibv_get(const char **why);

/* ibv_query_port with every field of *attr defined. 0 or an errno value. */
int weft__ibv_query_port(const weft__ibv *ibv, struct ibv_context *ctx, uint8_t port,
                         struct ibv_port_attr *attr);

/* The data path, through the context's provider ops as verbs.h's inlines do. Return values
 * as ibv_poll_cq (completions read, or < 0), ibv_post_send and ibv_post_recv (0 or errno). */
static inline int weft__ibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  return cq->context->ops.poll_cq(cq, n, wc);
}
static inline int weft__ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                                      struct ibv_send_wr **bad) {
  return qp->context->ops.post_send(qp, wr, bad);
}
static inline int weft__ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                                      struct ibv_recv_wr **bad) {
  return qp->context->ops.post_recv(qp, wr, bad);
}
#endif

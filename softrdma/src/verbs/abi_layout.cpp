// Compile-time checks that the system headers we build against have the layout that the
// clients we serve were compiled with (x86_64, rdma-core v44 era). A mismatch would make
// every inline verb call through the wrong slot.
#include <infiniband/verbs.h>
#include <cstddef>

static_assert(sizeof(ibv_context) == 328);
static_assert(offsetof(ibv_context, ops) == 8);
static_assert(offsetof(ibv_context, cmd_fd) == 264);
static_assert(offsetof(ibv_context, abi_compat) == 320);
static_assert(offsetof(ibv_context_ops, poll_cq) == 88);
static_assert(offsetof(ibv_context_ops, req_notify_cq) == 96);
static_assert(offsetof(ibv_context_ops, post_srq_recv) == 160);
static_assert(offsetof(ibv_context_ops, post_send) == 200);
static_assert(offsetof(ibv_context_ops, post_recv) == 208);
static_assert(sizeof(verbs_context) == 648);
static_assert(offsetof(verbs_context, context) == 320, "context must be the last member");
static_assert(offsetof(verbs_context, sz) == 312);
static_assert(sizeof(ibv_device) == 664);
static_assert(sizeof(ibv_qp) == 160 && sizeof(ibv_qp_ex) == 352);
static_assert(sizeof(ibv_cq) == 128 && sizeof(ibv_srq) == 128 && sizeof(ibv_mr) == 48);
static_assert(sizeof(ibv_wc) == 48 && sizeof(ibv_send_wr) == 128 && sizeof(ibv_recv_wr) == 32);
static_assert(sizeof(ibv_port_attr) == 52 && sizeof(ibv_device_attr) == 232);
static_assert(sizeof(ibv_grh) == 40, "UD receive buffers start with a 40-byte GRH");

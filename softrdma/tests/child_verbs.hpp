// Tests between two processes of one host: the test and a fork()ed child, each with its
// own device context, connected by RC. The child's side is plain code (fork_child.hpp).
#pragma once

#include <cstdio>

#include "fork_child.hpp"
#include "verbs_fixture.hpp"

namespace softrdma_test {

/// What one side tells the other: its QP and its registered buffer.
struct Endpoint {
  uint32_t qpn = 0;
  uint32_t rkey = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
};

inline constexpr uint8_t kReady = 'R';

// The child's side: its own device context and objects (never the parent's), plain code.

struct ChildVerbs {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  Buffer buffer;  // registered as `mr` (buffer.mr stays empty: no gtest checks in a child)
  ibv_gid gid{};
};

inline int child_fail(int code, const char* what) {
  std::fprintf(stderr, "child: %s (errno %d: %s)\n", what, errno, std::strerror(errno));
  return code;
}

/// Opens softrdma0 in the child and makes a CQ (on a completion channel if `with_channel`),
/// an RC QP and a registered buffer.
inline bool open_child_verbs(ChildVerbs& v, size_t length, uint8_t fill,
                             bool with_channel = false) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n < 1) return false;
  if (std::strcmp(ibv_get_device_name(list[0]), kDeviceName) == 0) v.ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!v.ctx || ibv_query_gid(v.ctx, kPort, 0, &v.gid) != 0) return false;
  v.pd = ibv_alloc_pd(v.ctx);
  if (with_channel && !(v.channel = ibv_create_comp_channel(v.ctx))) return false;
  v.cq = v.pd ? ibv_create_cq(v.ctx, 64, nullptr, v.channel, 0) : nullptr;
  v.qp = v.cq ? create_qp(v.pd, IBV_QPT_RC, v.cq, v.cq) : nullptr;
  v.buffer = allocate_buffer(length, fill);
  v.mr =
      v.qp && v.buffer.data() ? ibv_reg_mr(v.pd, v.buffer.data(), length, kRemoteAccess) : nullptr;
  return v.mr != nullptr;
}

/// Swaps endpoints with the parent, connects, and waits until both sides are connected.
inline bool child_connect(Link& link, ChildVerbs& v, Endpoint* parent) {
  const Endpoint mine{v.qp->qp_num, v.mr->rkey, v.buffer.addr(), v.buffer.size};
  uint8_t ready = 0;
  return link.send(mine) && link.receive(parent) &&
         rc_connect(v.qp, parent->qpn, v.gid, RcParams{}) == 0 && link.send(kReady) &&
         link.receive(&ready) && ready == kReady;
}

// ---------------------------------------------------------------------------------------------
// The parent's side.

class MultiProcessFixture : public VerbsTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(VerbsTest::SetUp());
    ASSERT_TRUE(link_.ok());
    cq_ = NewCq();
    qp_ = NewQp(IBV_QPT_RC, cq_, cq_);
    ASSERT_TRUE(cq_ && qp_);
  }

  /// Swaps endpoints with the child (`mine` offers `buffer`), connects the parent's QP and
  /// waits until the child is connected too.
  void ConnectToChild(const Buffer* buffer, const RcParams& params, Endpoint* child) {
    Endpoint mine{qp_->qp_num, 0, 0, 0};
    if (buffer) mine = Endpoint{qp_->qp_num, buffer->rkey(), buffer->addr(), buffer->size};
    ASSERT_TRUE(link_.send(mine));
    ASSERT_TRUE(link_.receive(child)) << "no endpoint from the child";
    ASSERT_EQ(rc_connect(qp_, child->qpn, gid0(), params), 0);
    ASSERT_TRUE(link_.send(kReady));
    uint8_t ready = 0;
    ASSERT_TRUE(link_.receive(&ready)) << "the child did not connect";
    ASSERT_EQ(ready, kReady);
  }

  Link link_;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
};

}  // namespace softrdma_test

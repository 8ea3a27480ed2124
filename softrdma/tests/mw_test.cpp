// Memory windows, type 1 (ibv_bind_mw) and type 2 (IBV_WR_BIND_MW): remote access through
// a window's key reaches exactly the bound range with exactly the bound rights, ends when
// the window is unbound, invalidated (locally or by a SEND_WITH_INV) or deallocated, and
// every misuse completes with the error a NIC reports.
#include "verbs_fixture.hpp"

namespace softrdma_test {
namespace {

constexpr int kBindable = kRemoteAccess | IBV_ACCESS_MW_BIND;
constexpr size_t kRegion = 4096;
constexpr size_t kWindowAt = 1024;  // the window covers [1024, 2048) of the region
constexpr size_t kWindowLength = 1024;

struct DeallocMw {
  void operator()(ibv_mw* mw) const { ibv_dealloc_mw(mw); }
};
using MwPtr = std::unique_ptr<ibv_mw, DeallocMw>;

ibv_send_wr bind_wr(uint64_t wr_id, ibv_mw* mw, uint32_t rkey, const Buffer& region,
                    int access = IBV_ACCESS_REMOTE_WRITE) {
  ibv_send_wr wr = send_wr(wr_id, IBV_WR_BIND_MW);
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = rkey;
  wr.bind_mw.bind_info.mr = region.mr.get();
  wr.bind_mw.bind_info.addr = region.addr(kWindowAt);
  wr.bind_mw.bind_info.length = kWindowLength;
  wr.bind_mw.bind_info.mw_access_flags = static_cast<unsigned>(access);
  return wr;
}

ibv_send_wr invalidate_wr(uint64_t wr_id, ibv_wr_opcode opcode, uint32_t rkey) {
  ibv_send_wr wr = send_wr(wr_id, opcode);
  wr.invalidate_rkey = rkey;
  return wr;
}

class MwTest : public RcLoopbackTest {
 protected:
  void SetUp() override {
    RcLoopbackTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(ConnectPair());
    region_ = NewBuffer(kRegion, kBindable, 0);
    source_ = NewBuffer(64, kRemoteAccess, 0x5a);
  }
  ibv_mw* NewMw(ibv_mw_type type) {
    windows_.emplace_back(ibv_alloc_mw(pd(), type));
    if (!windows_.back()) ADD_FAILURE() << "ibv_alloc_mw: " << std::strerror(errno);
    return windows_.back().get();
  }

  // Binds a type 1 window on b over the window range of region_; returns the completion.
  ibv_wc BindType1(ibv_mw* mw, int access = IBV_ACCESS_REMOTE_WRITE) {
    ibv_mw_bind bind{};
    bind.wr_id = 100;
    bind.send_flags = IBV_SEND_SIGNALED;
    bind.bind_info.mr = region_.mr.get();
    bind.bind_info.addr = region_.addr(kWindowAt);
    bind.bind_info.length = kWindowLength;
    bind.bind_info.mw_access_flags = static_cast<unsigned>(access);
    EXPECT_EQ(ibv_bind_mw(p_.b, mw, &bind), 0);
    return poll_one(p_.cq_b);
  }

  // Binds a type 2 window on b with a work request; returns the key it has then.
  uint32_t BindType2(ibv_mw* mw) {
    const uint32_t key = ibv_inc_rkey(mw->rkey);
    EXPECT_EQ(post_send(p_.b, bind_wr(101, mw, key, region_)), 0);
    const ibv_wc wc = poll_one(p_.cq_b);
    EXPECT_TRUE(completed(wc, 101));
    EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
    return key;
  }

  // a's RDMA `opcode` of 64 bytes through `rkey` at `offset` of region_; the completion.
  ibv_wc Access(uint32_t rkey, size_t offset, ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE) {
    EXPECT_EQ(post_send(p_.a, rdma_wr(7, opcode, region_.addr(offset), rkey), {source_.sge()}), 0);
    return poll_one(p_.cq_a);
  }

  Buffer region_, source_;
  std::vector<MwPtr> windows_;  // declared last: deallocated before the regions go
};

TEST_F(MwTest, BothTypesAreAdvertisedAndAllocatedAnUnknownTypeIsRefused) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx(), &attr), 0);
  EXPECT_TRUE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
  EXPECT_TRUE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  EXPECT_GT(attr.max_mw, 0);
  ibv_mw* one = NewMw(IBV_MW_TYPE_1);
  ibv_mw* two = NewMw(IBV_MW_TYPE_2);
  ASSERT_TRUE(one && two);
  EXPECT_NE(one->rkey, two->rkey);
  EXPECT_EQ(ibv_alloc_mw(pd(), static_cast<ibv_mw_type>(3)), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(MwTest, Type1WindowGrantsItsRangeAndRightsOnly) {
  ibv_mw* mw = NewMw(IBV_MW_TYPE_1);
  const uint32_t before = mw->rkey;
  const ibv_wc bound = BindType1(mw);
  ASSERT_TRUE(completed(bound, 100));
  EXPECT_EQ(bound.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(mw->rkey, ibv_inc_rkey(before));
  EXPECT_TRUE(completed(Access(mw->rkey, kWindowAt + kWindowLength - 64), 7));
  EXPECT_TRUE(region_.all(0x5a, kWindowAt + kWindowLength - 64, 64));
  EXPECT_TRUE(region_.all(0, 0, kWindowAt)) << "nothing outside the window";
}

TEST_F(MwTest, AccessBeyondTheWindowIsARemoteAccessError) {
  ibv_mw* mw = NewMw(IBV_MW_TYPE_1);
  ASSERT_TRUE(completed(BindType1(mw), 100));
  EXPECT_TRUE(
      completed(Access(mw->rkey, kWindowAt + kWindowLength - 32), 7, IBV_WC_REM_ACCESS_ERR));
  EXPECT_TRUE(region_.all(0));
}

TEST_F(MwTest, ARightTheWindowDoesNotGrantIsRefused) {
  ibv_mw* mw = NewMw(IBV_MW_TYPE_1);
  ASSERT_TRUE(completed(BindType1(mw, IBV_ACCESS_REMOTE_WRITE), 100));
  EXPECT_TRUE(completed(Access(mw->rkey, kWindowAt, IBV_WR_RDMA_READ), 7, IBV_WC_REM_ACCESS_ERR));
}

TEST_F(MwTest, Type1UnboundByAZeroLengthBindAndItsOldKeysFail) {
  ibv_mw* mw = NewMw(IBV_MW_TYPE_1);
  ASSERT_TRUE(completed(BindType1(mw), 100));
  const uint32_t bound_key = mw->rkey;
  ibv_mw_bind unbind{};
  unbind.wr_id = 102;
  unbind.send_flags = IBV_SEND_SIGNALED;
  ASSERT_EQ(ibv_bind_mw(p_.b, mw, &unbind), 0);
  ASSERT_TRUE(completed(poll_one(p_.cq_b), 102));
  EXPECT_NE(mw->rkey, bound_key);
  EXPECT_TRUE(completed(Access(bound_key, kWindowAt), 7, IBV_WC_REM_ACCESS_ERR));
}

TEST_F(MwTest, BindingIntoARegionWithoutMwBindAccessFails) {
  Buffer plain = NewBuffer(kRegion, kRemoteAccess, 0);
  ibv_mw* mw = NewMw(IBV_MW_TYPE_2);
  ASSERT_EQ(post_send(p_.b, bind_wr(103, mw, ibv_inc_rkey(mw->rkey), plain)), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_b), 103, IBV_WC_MW_BIND_ERR));
  EXPECT_EQ(qp_state(p_.b), IBV_QPS_ERR);
}

TEST_F(MwTest, Type2WindowIsReachedThroughItsQpOnly) {
  ibv_mw* mw = NewMw(IBV_MW_TYPE_2);
  const uint32_t key = BindType2(mw);
  EXPECT_TRUE(completed(Access(key, kWindowAt), 7));
  EXPECT_TRUE(region_.all(0x5a, kWindowAt, 64));
  // A second pair of the same PD: its b is not the QP the window is bound to.
  RcPair other;
  ASSERT_NO_FATAL_FAILURE(MakePair({}, &other));
  ASSERT_EQ(post_send(other.a, rdma_wr(8, IBV_WR_RDMA_WRITE, region_.addr(kWindowAt), key),
                      {source_.sge()}),
            0);
  EXPECT_TRUE(completed(poll_one(other.cq_a), 8, IBV_WC_REM_ACCESS_ERR));
}

TEST_F(MwTest, Type2IsNotBoundAgainBeforeItIsInvalidated) {
  ibv_mw* mw = NewMw(IBV_MW_TYPE_2);
  const uint32_t key = BindType2(mw);
  ASSERT_EQ(post_send(p_.b, bind_wr(104, mw, ibv_inc_rkey(key), region_)), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_b), 104, IBV_WC_MW_BIND_ERR));
}

TEST_F(MwTest, Type2LocalInvalidationEndsAccess) {
  ibv_mw* mw = NewMw(IBV_MW_TYPE_2);
  const uint32_t key = BindType2(mw);
  ASSERT_TRUE(completed(Access(key, kWindowAt), 7));
  ASSERT_EQ(post_send(p_.b, invalidate_wr(105, IBV_WR_LOCAL_INV, key)), 0);
  const ibv_wc wc = poll_one(p_.cq_b);
  EXPECT_TRUE(completed(wc, 105));
  EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
  EXPECT_TRUE(completed(Access(key, kWindowAt), 7, IBV_WC_REM_ACCESS_ERR));
}

TEST_F(MwTest, SendWithInvalidateEndsAccessAndTheReceiverSeesTheKey) {
  ibv_mw* mw = NewMw(IBV_MW_TYPE_2);
  const uint32_t key = BindType2(mw);
  Buffer inbox = NewBuffer(64);
  ASSERT_EQ(post_recv(p_.b, 9, {inbox.sge()}), 0);
  ASSERT_EQ(post_send(p_.a, invalidate_wr(10, IBV_WR_SEND_WITH_INV, key), {source_.sge()}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 10));
  const ibv_wc received = poll_one(p_.cq_b);
  ASSERT_TRUE(completed(received, 9));
  EXPECT_TRUE(received.wc_flags & IBV_WC_WITH_INV);
  EXPECT_EQ(received.invalidated_rkey, key);
  EXPECT_TRUE(inbox.all(0x5a));
  EXPECT_TRUE(completed(Access(key, kWindowAt), 7, IBV_WC_REM_ACCESS_ERR));
}

TEST_F(MwTest, SendWithInvalidateOfAKeyThatIsNoWindowFailsBothSides) {
  Buffer inbox = NewBuffer(64);
  ASSERT_EQ(post_recv(p_.b, 9, {inbox.sge()}), 0);
  ASSERT_EQ(
      post_send(p_.a, invalidate_wr(10, IBV_WR_SEND_WITH_INV, region_.rkey()), {source_.sge()}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 10, IBV_WC_REM_INV_REQ_ERR));
  EXPECT_TRUE(completed(poll_one(p_.cq_b), 9, IBV_WC_LOC_QP_OP_ERR));
  EXPECT_EQ(qp_state(p_.b), IBV_QPS_ERR);
}

TEST_F(MwTest, DeallocatingABoundWindowEndsAccessAndFreesItsRegion) {
  ibv_mw* mw = NewMw(IBV_MW_TYPE_2);
  const uint32_t key = BindType2(mw);
  EXPECT_EQ(ibv_dereg_mr(region_.mr.get()), EBUSY) << "a window is bound into it";
  windows_.clear();
  EXPECT_TRUE(completed(Access(key, kWindowAt), 7, IBV_WC_REM_ACCESS_ERR));
  EXPECT_EQ(ibv_dereg_mr(region_.mr.release()), 0);
}

TEST_F(MwTest, AType1BindPostedAsAWorkRequestIsRefused) {
  ibv_mw* mw = NewMw(IBV_MW_TYPE_1);
  ibv_send_wr wr = bind_wr(106, mw, ibv_inc_rkey(mw->rkey), region_);
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(p_.b, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
}

TEST_F(MwTest, AWindowKeyIsNoLocalKey) {
  ibv_mw* mw = NewMw(IBV_MW_TYPE_2);
  const uint32_t key = BindType2(mw);
  const ibv_sge through_window{region_.addr(kWindowAt), 64, key};
  ASSERT_EQ(post_send(p_.a, rdma_wr(11, IBV_WR_RDMA_WRITE, region_.addr(0), region_.rkey()),
                      {through_window}),
            0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 11, IBV_WC_LOC_PROT_ERR));
}

}  // namespace
}  // namespace softrdma_test

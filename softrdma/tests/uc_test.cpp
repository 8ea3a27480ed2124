// Unreliable connected QPs: connected like RC with the attributes of the unreliable service
// only; SEND and RDMA WRITE (with immediate); no acknowledgement, so the requester completes
// every message and the responder drops, silently, what it cannot take.
#include <arpa/inet.h>

#include "verbs_fixture.hpp"

namespace softrdma_test {
namespace {

class UcTest : public VerbsTest {
 protected:
  void ConnectUcPair() {
    cq_a_ = NewCq();
    cq_b_ = NewCq();
    a_ = NewQp(IBV_QPT_UC, cq_a_, cq_a_);
    b_ = NewQp(IBV_QPT_UC, cq_b_, cq_b_);
    ASSERT_TRUE(a_ && b_);
    ASSERT_EQ(uc_connect(a_, b_->qp_num, gid0()), 0);
    ASSERT_EQ(uc_connect(b_, a_->qp_num, gid0()), 0);
  }

  ibv_cq* cq_a_ = nullptr;
  ibv_cq* cq_b_ = nullptr;
  ibv_qp* a_ = nullptr;
  ibv_qp* b_ = nullptr;
};

// The kernel's masks for UC: RC's without the reliable service's attributes, which are
// refused (EINVAL) rather than ignored.
TEST_F(UcTest, TransitionsTakeTheUnreliableAttributesOnly) {
  ibv_cq* cq = NewCq();
  ibv_qp* qp = NewQp(IBV_QPT_UC, cq, cq);
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(rc_to_init(qp, IBV_ACCESS_REMOTE_WRITE), 0);
  EXPECT_EQ(rc_to_rtr(qp, qp->qp_num, gid0(), RcParams{}), EINVAL)
      << "max_dest_rd_atomic and min_rnr_timer are RC's";
  EXPECT_EQ(qp_state(qp), IBV_QPS_INIT);
  ibv_qp* other = NewQp(IBV_QPT_UC, cq, cq);
  ASSERT_EQ(uc_connect(other, qp->qp_num, gid0()), 0);
  EXPECT_EQ(qp_state(other), IBV_QPS_RTS);
  ibv_qp_attr a{};
  a.min_rnr_timer = 12;
  EXPECT_EQ(ibv_modify_qp(other, &a, IBV_QP_MIN_RNR_TIMER), EINVAL) << "no RNR NAKs in UC";
}

TEST_F(UcTest, SendsAndWritesArrive) {
  ASSERT_NO_FATAL_FAILURE(ConnectUcPair());
  Buffer out = NewBuffer(64, kRemoteAccess, 0x3c);
  Buffer in = NewBuffer(128, kRemoteAccess, 0);
  Buffer target = NewBuffer(64, kRemoteAccess, 0);
  ASSERT_EQ(post_recv(b_, 1, {in.sge(0, 64)}), 0);
  ASSERT_EQ(post_recv(b_, 2, {in.sge(64, 64)}), 0);
  ibv_send_wr send = send_wr(10, IBV_WR_SEND_WITH_IMM);
  send.imm_data = htonl(5);
  ASSERT_EQ(post_send(a_, send, {out.sge(0, 16)}), 0);
  ASSERT_EQ(post_send(a_, rdma_wr(11, IBV_WR_RDMA_WRITE, target.addr(0), target.rkey()),
                      {out.sge(0, 32)}),
            0);
  ibv_send_wr write_imm = rdma_wr(12, IBV_WR_RDMA_WRITE_WITH_IMM, target.addr(32), target.rkey());
  write_imm.imm_data = htonl(6);
  ASSERT_EQ(post_send(a_, write_imm, {out.sge(0, 8)}), 0);
  const std::vector<ibv_wc> sent = poll_n(cq_a_, 3);
  ASSERT_EQ(sent.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_TRUE(completed(sent[i], 10 + i));
  const std::vector<ibv_wc> got = poll_n(cq_b_, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(completed(got[0], 1));
  EXPECT_EQ(got[0].byte_len, 16u);
  EXPECT_EQ(ntohl(got[0].imm_data), 5u);
  EXPECT_TRUE(completed(got[1], 2));
  EXPECT_EQ(got[1].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(ntohl(got[1].imm_data), 6u);
  EXPECT_TRUE(in.all(0x3c, 0, 16));
  EXPECT_TRUE(target.all(0x3c, 0, 40));
}

TEST_F(UcTest, ReadAndAtomicsAreRefusedAtPost) {
  ASSERT_NO_FATAL_FAILURE(ConnectUcPair());
  Buffer local = NewBuffer(64);
  Buffer remote = NewBuffer(64);
  EXPECT_EQ(
      post_send(a_, rdma_wr(1, IBV_WR_RDMA_READ, remote.addr(), remote.rkey()), {local.sge(0, 8)}),
      EINVAL);
  EXPECT_EQ(
      post_send(a_, atomic_wr(2, IBV_WR_ATOMIC_FETCH_AND_ADD, remote.addr(), remote.rkey(), 1),
                {local.sge(0, 8)}),
      EINVAL);
  EXPECT_TRUE(no_completion(cq_a_));
}

// No receive posted: the message is lost, not retried. The requester completes it; the
// next message goes to the next receive; the responder stays in RTS.
TEST_F(UcTest, ASendWithoutAReceiveIsLostNotRetried) {
  ASSERT_NO_FATAL_FAILURE(ConnectUcPair());
  Buffer first = NewBuffer(16, kRemoteAccess, 0x01);
  Buffer second = NewBuffer(16, kRemoteAccess, 0x02);
  Buffer in = NewBuffer(16, kRemoteAccess, 0);
  ASSERT_EQ(post_send(a_, send_wr(1), {first.sge()}), 0);
  EXPECT_TRUE(completed(poll_one(cq_a_), 1));
  ASSERT_EQ(post_recv(b_, 7, {in.sge()}), 0);
  EXPECT_TRUE(no_completion(cq_b_)) << "the lost message arrived late";
  ASSERT_EQ(post_send(a_, send_wr(2), {second.sge()}), 0);
  EXPECT_TRUE(completed(poll_one(cq_a_), 2));
  EXPECT_TRUE(completed(poll_one(cq_b_), 7));
  EXPECT_TRUE(in.all(0x02));
  EXPECT_EQ(qp_state(b_), IBV_QPS_RTS);
}

// A write with a wrong key is dropped by the responder: the requester completes it, the
// target is untouched, both QPs stay in RTS and the next write lands.
TEST_F(UcTest, AWriteWithAWrongKeyIsDroppedAndBothQpsLive) {
  ASSERT_NO_FATAL_FAILURE(ConnectUcPair());
  Buffer out = NewBuffer(16, kRemoteAccess, 0x5a);
  Buffer target = NewBuffer(16, kRemoteAccess, 0);
  ASSERT_EQ(
      post_send(a_, rdma_wr(1, IBV_WR_RDMA_WRITE, target.addr(), target.rkey() + 1), {out.sge()}),
      0);
  EXPECT_TRUE(completed(poll_one(cq_a_), 1));
  EXPECT_TRUE(target.all(0));
  EXPECT_EQ(qp_state(a_), IBV_QPS_RTS);
  EXPECT_EQ(qp_state(b_), IBV_QPS_RTS);
  EXPECT_TRUE(no_completion(cq_b_));
  ASSERT_EQ(post_send(a_, rdma_wr(2, IBV_WR_RDMA_WRITE, target.addr(), target.rkey()), {out.sge()}),
            0);
  EXPECT_TRUE(completed(poll_one(cq_a_), 2));
  EXPECT_TRUE(target.all(0x5a));
}

}  // namespace
}  // namespace softrdma_test

// Shared receive queues: several QPs receiving from one, the limit event, queries.
#include <arpa/inet.h>

#include "verbs_fixture.hpp"

namespace softrdma_test {
namespace {

class SrqTest : public RcLoopbackTest {
 protected:
  // Two connected pairs whose receiving QPs (b) share one new SRQ.
  void MakePairsOnOneSrq(ibv_srq** srq, RcPair* one, RcPair* two) {
    *srq = NewSrq(16);
    ASSERT_NE(*srq, nullptr);
    PairOptions o;
    o.srq_b = *srq;
    ASSERT_NO_FATAL_FAILURE(MakePair(o, one));
    ASSERT_NO_FATAL_FAILURE(MakePair(o, two));
  }
};

TEST_F(SrqTest, QpsSharingAnSrqTakeItsReceivesInOrder) {
  ibv_srq* srq = nullptr;
  RcPair one, two;
  ASSERT_NO_FATAL_FAILURE(MakePairsOnOneSrq(&srq, &one, &two));
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(one.b, &attr, 0, &init), 0);
  EXPECT_EQ(init.srq, srq);

  Buffer src = NewBuffer(64);
  Buffer dst = NewBuffer(256, kRemoteAccess, 0);
  src.fill(1);
  std::memset(src.data() + 32, 2, 32);
  // A QP receiving from an SRQ takes no receives of its own.
  EXPECT_EQ(post_recv(one.b, 1, {dst.sge(0, 64)}), EINVAL);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(post_srq_recv(srq, 100 + i, {dst.sge(i * 64, 64)}), 0);

  ASSERT_EQ(post_send(one.a, send_wr(1), {src.sge(0, 32)}), 0);
  ASSERT_EQ(post_send(two.a, send_wr(2), {src.sge(32, 32)}), 0);
  EXPECT_TRUE(completed(poll_one(one.cq_a), 1));
  EXPECT_TRUE(completed(poll_one(two.cq_a), 2));
  const ibv_wc r1 = poll_one(one.cq_b);
  const ibv_wc r2 = poll_one(two.cq_b);
  EXPECT_TRUE(completed(r1, 100));
  EXPECT_EQ(r1.qp_num, one.b->qp_num);
  EXPECT_EQ(r1.byte_len, 32u);
  EXPECT_TRUE(completed(r2, 101));
  EXPECT_EQ(r2.qp_num, two.b->qp_num);
  EXPECT_TRUE(dst.all(1, 0, 32));
  EXPECT_TRUE(dst.all(2, 64, 32));
  EXPECT_TRUE(dst.all(0, 128, 128)) << "the third receive is still posted";
}

// WRITE_WITH_IMM and SEND from two QPs take an SRQ's receives in posting order, each once.
TEST_F(SrqTest, WritesWithImmediateAndSendsTakeTheSrqsReceivesInOrder) {
  ibv_srq* srq = nullptr;
  RcPair one, two;
  ASSERT_NO_FATAL_FAILURE(MakePairsOnOneSrq(&srq, &one, &two));
  Buffer src = NewBuffer(64, kRemoteAccess, 5);
  Buffer dst = NewBuffer(256, kRemoteAccess, 0);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(post_srq_recv(srq, 100 + i, {dst.sge(128, 64)}), 0);
  for (uint64_t i = 0; i < 4; ++i) {
    RcPair& p = i % 2 ? two : one;
    ibv_send_wr wr = i < 2 ? rdma_wr(i, IBV_WR_RDMA_WRITE_WITH_IMM, dst.addr(i * 16), dst.rkey())
                           : send_wr(i, IBV_WR_SEND_WITH_IMM);
    wr.imm_data = htonl(static_cast<uint32_t>(i));
    ASSERT_EQ(post_send(p.a, wr, {src.sge(0, 16)}), 0);
    EXPECT_TRUE(completed(poll_one(p.cq_a), i));
    const ibv_wc r = poll_one(p.cq_b);
    EXPECT_TRUE(completed(r, 100 + i));
    EXPECT_EQ(r.qp_num, p.b->qp_num);
    EXPECT_EQ(r.src_qp, p.a->qp_num);
    EXPECT_EQ(r.opcode, i < 2 ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV);
    EXPECT_EQ(r.imm_data, htonl(static_cast<uint32_t>(i)));
    EXPECT_EQ(r.byte_len, 16u);
  }
  EXPECT_TRUE(dst.all(5, 0, 32));
  EXPECT_TRUE(dst.all(5, 128, 16));
  EXPECT_TRUE(no_completion(one.cq_b));
  EXPECT_TRUE(no_completion(two.cq_b));
}

TEST_F(SrqTest, QueryAndModifyTheLimit) {
  ibv_srq* srq = NewSrq(16, 2);
  ASSERT_NE(srq, nullptr);
  ibv_srq_attr attr{};
  ASSERT_EQ(ibv_query_srq(srq, &attr), 0);
  EXPECT_GE(attr.max_wr, 16u);
  EXPECT_GE(attr.max_sge, 2u);
  EXPECT_EQ(attr.srq_limit, 0u);

  ibv_srq_attr change{};
  change.srq_limit = 5;
  ASSERT_EQ(ibv_modify_srq(srq, &change, IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(ibv_query_srq(srq, &attr), 0);
  EXPECT_EQ(attr.srq_limit, 5u);
  change.srq_limit = attr.max_wr + 1;
  EXPECT_EQ(ibv_modify_srq(srq, &change, IBV_SRQ_LIMIT), EINVAL);
  ASSERT_EQ(ibv_query_srq(srq, &attr), 0);
  EXPECT_EQ(attr.srq_limit, 5u);
}

TEST_F(SrqTest, LimitEventWhenTheQueueDropsBelowTheLimit) {
  ibv_srq* srq = NewSrq(16);
  ASSERT_NE(srq, nullptr);
  PairOptions o;
  o.srq_b = srq;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(256);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(post_srq_recv(srq, 100 + i, {dst.sge(i * 64, 64)}), 0);
  ibv_srq_attr change{};
  change.srq_limit = 3;
  ASSERT_EQ(ibv_modify_srq(srq, &change, IBV_SRQ_LIMIT), 0);

  // 4 -> 3 receives: not below the limit yet.
  ASSERT_EQ(post_send(p_.a, send_wr(1), {src.sge(0, 8)}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_b), 100));
  EXPECT_FALSE(wait_readable(ctx()->async_fd, kQuiet)) << "event before the limit was crossed";

  // 3 -> 2: below.
  ASSERT_EQ(post_send(p_.a, send_wr(2), {src.sge(0, 8)}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_b), 101));
  const std::optional<ibv_async_event> event = next_async_event(ctx(), kTimeout);
  ASSERT_TRUE(event) << "no SRQ limit event";
  EXPECT_EQ(event->event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(event->element.srq, srq);

  // The event disarms the limit: no further events.
  ibv_srq_attr attr{};
  ASSERT_EQ(ibv_query_srq(srq, &attr), 0);
  EXPECT_EQ(attr.srq_limit, 0u);
  ASSERT_EQ(post_send(p_.a, send_wr(3), {src.sge(0, 8)}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_b), 102));
  EXPECT_FALSE(wait_readable(ctx()->async_fd, kQuiet));
  EXPECT_EQ(poll_n(p_.cq_a, 3).size(), 3u);
}

TEST_F(SrqTest, ErrorOnAnSrqQpRaisesLastWqeReachedAndKeepsTheSrq) {
  ibv_srq* srq = nullptr;
  RcPair one, two;
  ASSERT_NO_FATAL_FAILURE(MakePairsOnOneSrq(&srq, &one, &two));
  Buffer src = NewBuffer(64, kRemoteAccess, 3);
  Buffer dst = NewBuffer(64);
  ASSERT_EQ(post_srq_recv(srq, 100, {dst.sge()}), 0);

  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(one.b, &a, IBV_QP_STATE), 0);
  const std::optional<ibv_async_event> event = next_async_event(ctx(), kTimeout);
  ASSERT_TRUE(event);
  EXPECT_EQ(event->event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
  EXPECT_EQ(event->element.qp, one.b);
  EXPECT_TRUE(no_completion(one.cq_b, Millis{10})) << "the SRQ's receives are not flushed";

  ASSERT_EQ(post_send(two.a, send_wr(1), {src.sge(0, 8)}), 0);
  EXPECT_TRUE(completed(poll_one(two.cq_a), 1));
  EXPECT_TRUE(completed(poll_one(two.cq_b), 100));
  EXPECT_TRUE(dst.all(3, 0, 8));
}

TEST_F(SrqTest, DestroyWhileAQpUsesItIsEbusy) {
  SrqPtr srq;
  {
    ibv_srq_init_attr init{};
    init.attr.max_wr = 8;
    init.attr.max_sge = 1;
    srq.reset(ibv_create_srq(pd(), &init));
    ASSERT_NE(srq, nullptr);
  }
  ibv_cq* cq = NewCq();
  ASSERT_NE(cq, nullptr);
  ibv_qp* qp = NewQp(IBV_QPT_RC, cq, cq, {}, true, srq.get());
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(ibv_destroy_srq(srq.get()), EBUSY);
  ASSERT_EQ(DestroyQpNow(qp), 0);
  EXPECT_EQ(ibv_destroy_srq(srq.release()), 0);
}

}  // namespace
}  // namespace softrdma_test

// The QP state machine: required and allowed attribute masks, queries, posting per state,
// the ERROR state's flushes, and send-queue drain.
#include "verbs_fixture.hpp"

namespace softrdma_test {
namespace {

class QpStateTest : public RcLoopbackTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(RcLoopbackTest::SetUp());
    cq_ = NewCq();
    ASSERT_NE(cq_, nullptr);
  }
  ibv_qp* NewRcQp() { return NewQp(IBV_QPT_RC, cq_, cq_); }

  static ibv_qp_attr init_attr() {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = kPort;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    a.qkey = 0x1234;
    a.path_mtu = IBV_MTU_1024;
    return a;
  }

  ibv_cq* cq_ = nullptr;
};

constexpr int kRcInitMask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kUdInitMask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;

TEST_F(QpStateTest, RcResetToInitNeedsExactlyItsAttributes) {
  ibv_qp* qp = NewRcQp();
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr a = init_attr();
  EXPECT_EQ(ibv_modify_qp(qp, &a, kRcInitMask & ~IBV_QP_ACCESS_FLAGS), EINVAL);
  EXPECT_EQ(ibv_modify_qp(qp, &a, kRcInitMask & ~IBV_QP_PORT), EINVAL);
  EXPECT_EQ(ibv_modify_qp(qp, &a, kRcInitMask | IBV_QP_QKEY), EINVAL);
  EXPECT_EQ(ibv_modify_qp(qp, &a, kRcInitMask | IBV_QP_PATH_MTU), EINVAL);
  EXPECT_EQ(qp_state(qp), IBV_QPS_RESET);
  a.port_num = 2;
  EXPECT_EQ(ibv_modify_qp(qp, &a, kRcInitMask), EINVAL) << "no port 2";
  a.port_num = kPort;
  EXPECT_EQ(ibv_modify_qp(qp, &a, kRcInitMask), 0);
  EXPECT_EQ(qp_state(qp), IBV_QPS_INIT);
  EXPECT_EQ(qp->state, IBV_QPS_INIT);
}

// The port is RoCE: like a RoCE NIC, RTR refuses a path without a GRH (on one host it
// would work and fail only later, across hosts).
TEST_F(QpStateTest, RcRtrWithoutAGrhIsEinvalOnTheRocePort) {
  ibv_qp* qp = NewRcQp();
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(rc_to_init(qp, kRemoteAccess), 0);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = qp->qp_num;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr = global_ah_attr(gid0());
  a.ah_attr.is_global = 0;
  constexpr int kMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                        IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  EXPECT_EQ(ibv_modify_qp(qp, &a, kMask), EINVAL);
  EXPECT_EQ(qp_state(qp), IBV_QPS_INIT);
  a.ah_attr.is_global = 1;
  EXPECT_EQ(ibv_modify_qp(qp, &a, kMask), 0);
}

TEST_F(QpStateTest, UdResetToInitNeedsExactlyItsAttributes) {
  ibv_qp* qp = NewQp(IBV_QPT_UD, cq_, cq_);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr a = init_attr();
  EXPECT_EQ(ibv_modify_qp(qp, &a, kUdInitMask & ~IBV_QP_QKEY), EINVAL);
  EXPECT_EQ(ibv_modify_qp(qp, &a, kUdInitMask | IBV_QP_ACCESS_FLAGS), EINVAL);
  EXPECT_EQ(qp_state(qp), IBV_QPS_RESET);
  EXPECT_EQ(ibv_modify_qp(qp, &a, kUdInitMask), 0);
  EXPECT_EQ(qp_state(qp), IBV_QPS_INIT);
}

TEST_F(QpStateTest, SkippingAStateIsEinval) {
  ibv_qp* qp = NewRcQp();
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);
  a.qp_state = IBV_QPS_RTR;
  EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);
  ASSERT_EQ(rc_to_init(qp, 0), 0);
  RcParams p;
  ASSERT_EQ(rc_to_rts(qp, p), EINVAL) << "INIT -> RTS";
  // The current state, when given, must be right.
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_ERR;
  a.cur_qp_state = IBV_QPS_RESET;
  EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_CUR_STATE), EINVAL);
  EXPECT_EQ(qp_state(qp), IBV_QPS_INIT);
}

TEST_F(QpStateTest, RcBringUpIsReportedByQueryQp) {
  ibv_qp* qp = NewRcQp();
  ibv_qp* peer = NewRcQp();
  ASSERT_TRUE(qp && peer);
  RcParams p;
  p.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  p.timeout = 12;
  p.retry_cnt = 5;
  p.rnr_retry = 3;
  p.min_rnr_timer = 12;
  p.psn = 0x123;
  p.mtu = IBV_MTU_1024;
  p.max_rd_atomic = 4;
  ASSERT_EQ(rc_to_init(qp, p.access), 0);
  ASSERT_EQ(rc_to_rtr(qp, peer->qp_num, gid0(), p), 0);
  EXPECT_EQ(qp_state(qp), IBV_QPS_RTR);
  ASSERT_EQ(rc_to_rts(qp, p), 0);

  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN, &init), 0);
  EXPECT_EQ(a.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(a.path_mtu, IBV_MTU_1024);
  EXPECT_EQ(a.dest_qp_num, peer->qp_num);
  EXPECT_EQ(a.rq_psn, 0x123u);
  EXPECT_EQ(a.sq_psn, 0x123u);
  EXPECT_EQ(a.qp_access_flags, static_cast<unsigned>(p.access));
  EXPECT_EQ(a.timeout, 12);
  EXPECT_EQ(a.retry_cnt, 5);
  EXPECT_EQ(a.rnr_retry, 3);
  EXPECT_EQ(a.min_rnr_timer, 12);
  EXPECT_EQ(a.max_rd_atomic, 4);
  EXPECT_EQ(a.max_dest_rd_atomic, 4);
  EXPECT_EQ(a.port_num, kPort);
  EXPECT_EQ(a.ah_attr.is_global, 1);
  EXPECT_EQ(std::memcmp(a.ah_attr.grh.dgid.raw, gid0().raw, 16), 0);
  EXPECT_GE(a.cap.max_send_wr, 64u);
  EXPECT_GE(a.cap.max_recv_wr, 64u);
  EXPECT_EQ(init.qp_type, IBV_QPT_RC);
  EXPECT_EQ(init.send_cq, cq_);
  EXPECT_EQ(init.recv_cq, cq_);
  EXPECT_EQ(init.srq, nullptr);
  EXPECT_EQ(init.sq_sig_all, 1);
  EXPECT_GE(init.cap.max_send_sge, 4u);
  EXPECT_GE(init.cap.max_inline_data, 64u);
  EXPECT_EQ(qp->state, IBV_QPS_RTS);
}

TEST_F(QpStateTest, UdBringUpIsReportedByQueryQp) {
  ibv_qp* qp = NewQp(IBV_QPT_UD, cq_, cq_);
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(ud_to_rts(qp, 0x4242), 0);
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_QKEY, &init), 0);
  EXPECT_EQ(a.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(a.qkey, 0x4242u);
  EXPECT_EQ(a.port_num, kPort);
  EXPECT_EQ(init.qp_type, IBV_QPT_UD);
}

TEST_F(QpStateTest, PostSendBeforeRtsIsEinval) {
  ibv_qp* qp = NewRcQp();
  ibv_qp* peer = NewRcQp();
  ASSERT_TRUE(qp && peer);
  Buffer src = NewBuffer(64);
  ibv_sge sge = src.sge(0, 8);
  ibv_send_wr wr = send_wr(1);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  auto post = [&] {
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(qp, &wr, &bad);
    EXPECT_EQ(bad, rc ? &wr : nullptr);
    return rc;
  };
  EXPECT_EQ(post(), EINVAL) << "RESET";
  ASSERT_EQ(rc_to_init(qp, kRemoteAccess), 0);
  EXPECT_EQ(post(), EINVAL) << "INIT";
  ASSERT_EQ(rc_to_rtr(qp, peer->qp_num, gid0(), RcParams{}), 0);
  EXPECT_EQ(post(), EINVAL) << "RTR";
  EXPECT_TRUE(no_completion(cq_, Millis{10}));
}

TEST_F(QpStateTest, PostRecvInResetIsEinval) {
  ibv_qp* qp = NewRcQp();
  ASSERT_NE(qp, nullptr);
  Buffer dst = NewBuffer(64);
  ibv_sge sge = dst.sge();
  ibv_recv_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_recv(qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  ASSERT_EQ(rc_to_init(qp, kRemoteAccess), 0);
  bad = nullptr;
  EXPECT_EQ(ibv_post_recv(qp, &wr, &bad), 0) << "receives may be posted from INIT on";
  EXPECT_EQ(bad, nullptr);
}

TEST_F(QpStateTest, ErrorFlushesReceivesAndLaterSends) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer buf = NewBuffer(256);
  for (uint64_t id = 1; id <= 3; ++id)
    ASSERT_EQ(post_recv(p_.a, id, {buf.sge((id - 1) * 64, 64)}), 0);

  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(p_.a, &a, IBV_QP_STATE), 0);
  EXPECT_EQ(qp_state(p_.a), IBV_QPS_ERR);
  for (uint64_t id = 1; id <= 3; ++id) {
    const ibv_wc wc = poll_one(p_.cq_a);
    EXPECT_TRUE(completed(wc, id, IBV_WC_WR_FLUSH_ERR));
    EXPECT_EQ(wc.qp_num, p_.a->qp_num);
  }
  // Posting still works in ERROR; everything completes flushed.
  ASSERT_EQ(post_send(p_.a, send_wr(10), {buf.sge(0, 8)}), 0);
  const ibv_wc wc = poll_one(p_.cq_a);
  EXPECT_TRUE(completed(wc, 10, IBV_WC_WR_FLUSH_ERR));
  EXPECT_EQ(wc.qp_num, p_.a->qp_num);
  ASSERT_EQ(post_recv(p_.a, 11, {buf.sge(0, 64)}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 11, IBV_WC_WR_FLUSH_ERR));
  EXPECT_TRUE(no_completion(p_.cq_b));
}

TEST_F(QpStateTest, ErrorFlushesSendsWaitingForTheResponder) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());  // rnr_retry 7: sends wait for receives
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_EQ(post_send(p_.a, send_wr(id), {src.sge(0, 8)}), 0);
  EXPECT_TRUE(no_completion(p_.cq_a, Millis{10}));
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(p_.a, &a, IBV_QP_STATE), 0);
  for (uint64_t id = 1; id <= 3; ++id)
    EXPECT_TRUE(completed(poll_one(p_.cq_a), id, IBV_WC_WR_FLUSH_ERR));
  EXPECT_TRUE(no_completion(p_.cq_a));
  EXPECT_TRUE(no_completion(p_.cq_b, Millis{0}));
}

TEST_F(QpStateTest, ResetAfterErrorAllowsReconnecting) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer buf = NewBuffer(256, kRemoteAccess, 7);
  ASSERT_EQ(post_recv(p_.b, 1, {buf.sge(128, 64)}), 0);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(p_.b, &a, IBV_QP_STATE), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_b), 1, IBV_WC_WR_FLUSH_ERR));
  for (ibv_qp* qp : {p_.a, p_.b}) {
    a.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
    a.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
    EXPECT_EQ(qp_state(qp), IBV_QPS_RESET);
  }
  ASSERT_EQ(rc_connect(p_.a, p_.b->qp_num, gid0(), RcParams{}), 0);
  ASSERT_EQ(rc_connect(p_.b, p_.a->qp_num, gid0(), RcParams{}), 0);
  ASSERT_EQ(post_recv(p_.b, 2, {buf.sge(128, 64)}), 0);
  ASSERT_EQ(post_send(p_.a, send_wr(3), {buf.sge(0, 16)}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 3));
  const ibv_wc wc = poll_one(p_.cq_b);
  EXPECT_TRUE(completed(wc, 2));
  EXPECT_EQ(wc.byte_len, 16u);
}

// rdma-core's test_mr_rereg_pd recovers a QP through RESET: completions it left unpolled
// must not be read as the recovered QP's (mlx5, mlx4 and hns purge them too).
TEST_F(QpStateTest, ResetRemovesTheQpsUnpolledCompletionsOnly) {
  ibv_cq* shared = NewCq();
  ASSERT_NE(shared, nullptr);
  PairOptions o;
  o.a_send_cq = o.a_recv_cq = o.b_send_cq = o.b_recv_cq = shared;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer buf = NewBuffer(256, kRemoteAccess, 7);
  ASSERT_EQ(post_recv(p_.b, 1, {buf.sge(128, 64)}), 0);
  ASSERT_EQ(post_recv(p_.b, 2, {buf.sge(128, 64)}), 0);
  ASSERT_EQ(post_send(p_.a, send_wr(3), {buf.sge(0, 16)}), 0);  // a's send, b's receive 1
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(p_.b, &a, IBV_QP_STATE), 0);  // flushes b's receive 2
  a.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(p_.b, &a, IBV_QP_STATE), 0);
  ibv_wc wc[4];
  ASSERT_EQ(ibv_poll_cq(shared, 4, wc), 1) << "b's receive and its flush are gone";
  EXPECT_EQ(wc[0].qp_num, p_.a->qp_num);
  EXPECT_TRUE(completed(wc[0], 3));
}

TEST_F(QpStateTest, RtrQpReceives) {
  ibv_qp* sender = NewRcQp();
  ibv_qp* receiver = NewRcQp();
  ASSERT_TRUE(sender && receiver);
  ASSERT_EQ(rc_connect(sender, receiver->qp_num, gid0(), RcParams{}), 0);
  ASSERT_EQ(rc_to_init(receiver, kRemoteAccess), 0);
  ASSERT_EQ(rc_to_rtr(receiver, sender->qp_num, gid0(), RcParams{}), 0);
  Buffer src = NewBuffer(64, kRemoteAccess, 0x12);
  Buffer dst = NewBuffer(64);
  ASSERT_EQ(post_recv(receiver, 100, {dst.sge()}), 0);
  ASSERT_EQ(post_send(sender, send_wr(1), {src.sge(0, 16)}), 0);
  ASSERT_EQ(
      post_send(sender, rdma_wr(2, IBV_WR_RDMA_WRITE, dst.addr(32), dst.rkey()), {src.sge(0, 16)}),
      0);
  const std::vector<ibv_wc> wcs = poll_n(cq_, 3);
  ASSERT_EQ(wcs.size(), 3u);
  int sends = 0, receives = 0;
  for (const ibv_wc& wc : wcs) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    if (wc.qp_num == receiver->qp_num) ++receives;
    if (wc.qp_num == sender->qp_num) ++sends;
  }
  EXPECT_EQ(sends, 2);
  EXPECT_EQ(receives, 1);
  EXPECT_TRUE(dst.all(0x12, 0, 16));
  EXPECT_TRUE(dst.all(0x12, 32, 16));
}

TEST_F(QpStateTest, SendQueueDrainedHoldsNewWorkUntilRts) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer src = NewBuffer(64, kRemoteAccess, 0x11);
  Buffer dst = NewBuffer(64);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_SQD;
  ASSERT_EQ(ibv_modify_qp(p_.a, &a, IBV_QP_STATE), 0);
  EXPECT_EQ(qp_state(p_.a), IBV_QPS_SQD);

  // Work posted while drained waits.
  ASSERT_EQ(
      post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge(0, 32)}), 0);
  EXPECT_TRUE(no_completion(p_.cq_a));
  EXPECT_TRUE(dst.all(0));

  a.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(ibv_modify_qp(p_.a, &a, IBV_QP_STATE), 0);
  EXPECT_EQ(qp_state(p_.a), IBV_QPS_RTS);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1));
  EXPECT_TRUE(dst.all(0x11, 0, 32));
  EXPECT_TRUE(dst.all(0, 32, 32));
}

}  // namespace
}  // namespace softrdma_test

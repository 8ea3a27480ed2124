// Error semantics of RC: local and remote protection, lengths, RNR, flushing after an error.
#include <atomic>
#include <thread>

#include <arpa/inet.h>

#include "verbs_fixture.hpp"

namespace softrdma_test {
namespace {

class RcErrorsTest : public RcLoopbackTest {
 protected:
  // Checks that a remote access error on `p_` left the responder in ERROR and raised its
  // IBV_EVENT_QP_ACCESS_ERR.
  void ExpectResponderAccessError() {
    EXPECT_EQ(qp_state(p_.a), IBV_QPS_ERR) << "requester";
    EXPECT_EQ(qp_state(p_.b), IBV_QPS_ERR) << "responder";
    const std::optional<ibv_async_event> event = next_async_event(ctx(), kTimeout);
    ASSERT_TRUE(event) << "no asynchronous event";
    EXPECT_EQ(event->event_type, IBV_EVENT_QP_ACCESS_ERR);
    EXPECT_EQ(event->element.qp, p_.b);
  }
};

TEST_F(RcErrorsTest, WrongLkeyIsLocalProtectionError) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);
  ASSERT_EQ(post_recv(p_.b, 100, {dst.sge()}), 0);
  ibv_sge bad = src.sge(0, 16);
  bad.lkey ^= 0x5a5a0000u;
  ASSERT_EQ(post_send(p_.a, send_wr(1), {bad}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1, IBV_WC_LOC_PROT_ERR));
  EXPECT_EQ(qp_state(p_.a), IBV_QPS_ERR);
  EXPECT_TRUE(no_completion(p_.cq_b)) << "nothing was sent";
  EXPECT_EQ(qp_state(p_.b), IBV_QPS_RTS);
}

TEST_F(RcErrorsTest, SgeBeyondItsRegionIsLocalProtectionError) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer src = NewBuffer(4096, kRemoteAccess, 1);
  Buffer dst = NewBuffer(4096);
  ASSERT_EQ(
      post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge(4000, 200)}),
      0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1, IBV_WC_LOC_PROT_ERR));
  EXPECT_TRUE(dst.all(0));
}

TEST_F(RcErrorsTest, ReadIntoRegionWithoutLocalWriteIsLocalProtectionError) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer local = NewBuffer(64, IBV_ACCESS_REMOTE_READ);
  Buffer remote = NewBuffer(64, kRemoteAccess, 9);
  ASSERT_EQ(post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_READ, remote.addr(), remote.rkey()),
                      {local.sge(0, 16)}),
            0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1, IBV_WC_LOC_PROT_ERR));
  EXPECT_TRUE(local.all(0));
}

TEST_F(RcErrorsTest, WrongRkeyIsRemoteAccessErrorAndFailsTheResponder) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);
  ASSERT_EQ(post_recv(p_.b, 100, {dst.sge()}), 0);
  ASSERT_EQ(post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey() ^ 0x5a5a0000u),
                      {src.sge(0, 16)}),
            0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1, IBV_WC_REM_ACCESS_ERR));
  EXPECT_TRUE(dst.all(0));
  ASSERT_NO_FATAL_FAILURE(ExpectResponderAccessError());
  // The responder's posted receive is flushed.
  EXPECT_TRUE(completed(poll_one(p_.cq_b), 100, IBV_WC_WR_FLUSH_ERR));
}

TEST_F(RcErrorsTest, RemoteAddressBeyondTheRegionIsRemoteAccessError) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(4096);
  ASSERT_EQ(
      post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_WRITE, dst.addr(4090), dst.rkey()), {src.sge(0, 16)}),
      0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1, IBV_WC_REM_ACCESS_ERR));
  EXPECT_TRUE(dst.all(0));
  ASSERT_NO_FATAL_FAILURE(ExpectResponderAccessError());
}

TEST_F(RcErrorsTest, RegionWithoutRemoteWriteIsRemoteAccessError) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_EQ(
      post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge(0, 16)}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1, IBV_WC_REM_ACCESS_ERR));
  EXPECT_TRUE(dst.all(0));
  ASSERT_NO_FATAL_FAILURE(ExpectResponderAccessError());
}

TEST_F(RcErrorsTest, QpWithoutRemoteWriteAccessIsRemoteAccessError) {
  PairOptions o;
  o.b.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);
  ASSERT_EQ(
      post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge(0, 16)}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1, IBV_WC_REM_ACCESS_ERR));
  EXPECT_TRUE(dst.all(0));
  ASSERT_NO_FATAL_FAILURE(ExpectResponderAccessError());
}

TEST_F(RcErrorsTest, QpWithoutRemoteReadAccessIsRemoteAccessError) {
  PairOptions o;
  o.b.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer local = NewBuffer(64);
  Buffer remote = NewBuffer(64, kRemoteAccess, 9);
  ASSERT_EQ(post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_READ, remote.addr(), remote.rkey()),
                      {local.sge(0, 16)}),
            0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1, IBV_WC_REM_ACCESS_ERR));
  EXPECT_TRUE(local.all(0));
  ASSERT_NO_FATAL_FAILURE(ExpectResponderAccessError());
}

TEST_F(RcErrorsTest, ReceiveTooSmallIsLengthErrorAtBothEnds) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);
  ASSERT_EQ(post_recv(p_.b, 100, {dst.sge(0, 16)}), 0);
  ASSERT_EQ(post_send(p_.a, send_wr(1), {src.sge(0, 64)}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_b), 100, IBV_WC_LOC_LEN_ERR));
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1, IBV_WC_REM_INV_REQ_ERR));
  EXPECT_EQ(qp_state(p_.a), IBV_QPS_ERR);
  EXPECT_EQ(qp_state(p_.b), IBV_QPS_ERR);
  EXPECT_TRUE(dst.all(0, 16, 48));
}

TEST_F(RcErrorsTest, NoReceiveWithoutRnrRetriesIsRnrRetryExceeded) {
  PairOptions o;
  o.a.rnr_retry = 0;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  ASSERT_EQ(post_send(p_.a, send_wr(1), {src.sge(0, 16)}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1, IBV_WC_RNR_RETRY_EXC_ERR));
  EXPECT_EQ(qp_state(p_.a), IBV_QPS_ERR);
  EXPECT_EQ(qp_state(p_.b), IBV_QPS_RTS) << "RNR does not fail the responder";
}

TEST_F(RcErrorsTest, InfiniteRnrRetryCompletesOnceAReceiveIsPosted) {
  PairOptions o;
  o.a.rnr_retry = 7;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer src = NewBuffer(64, kRemoteAccess, 0x44);
  Buffer dst = NewBuffer(64);
  ASSERT_EQ(post_send(p_.a, send_wr(1), {src.sge(0, 16)}), 0);
  EXPECT_TRUE(no_completion(p_.cq_a));
  ASSERT_EQ(post_recv(p_.b, 100, {dst.sge()}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1));
  const ibv_wc r = poll_one(p_.cq_b);
  EXPECT_TRUE(completed(r, 100));
  EXPECT_EQ(r.byte_len, 16u);
  EXPECT_TRUE(dst.all(0x44, 0, 16));
}

// A WRITE_WITH_IMM needs a receive to complete: without one it waits (RNR) and writes
// nothing; the receive posted later takes it, once.
TEST_F(RcErrorsTest, WriteWithImmediateWaitsForAReceiveAndWritesNothingMeanwhile) {
  PairOptions o;
  o.a.rnr_retry = 7;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer src = NewBuffer(64, kRemoteAccess, 0x45);
  Buffer dst = NewBuffer(64, kRemoteAccess, 0);
  ibv_send_wr wr = rdma_wr(1, IBV_WR_RDMA_WRITE_WITH_IMM, dst.addr(8), dst.rkey());
  wr.imm_data = htonl(7);
  ASSERT_EQ(post_send(p_.a, wr, {src.sge(0, 16)}), 0);
  EXPECT_TRUE(no_completion(p_.cq_a));
  EXPECT_TRUE(dst.all(0)) << "written before a receive was there";
  ASSERT_EQ(post_recv(p_.b, 100), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1));
  const ibv_wc r = poll_one(p_.cq_b);
  EXPECT_TRUE(completed(r, 100));
  EXPECT_EQ(r.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(r.imm_data, htonl(7));
  EXPECT_TRUE(dst.all(0x45, 8, 16));
  EXPECT_TRUE(no_completion(p_.cq_b)) << "the receive completed twice";
}

// A WRITE_WITH_IMM whose key the target does not grant fails without taking the receive.
TEST_F(RcErrorsTest, WriteWithImmediateToAWrongKeyTakesNoReceive) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64, kRemoteAccess, 0);
  ASSERT_EQ(post_recv(p_.b, 100), 0);
  ibv_send_wr wr = rdma_wr(1, IBV_WR_RDMA_WRITE_WITH_IMM, dst.addr(), dst.rkey() + 1);
  ASSERT_EQ(post_send(p_.a, wr, {src.sge(0, 16)}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1, IBV_WC_REM_ACCESS_ERR));
  EXPECT_TRUE(dst.all(0));
  // The responder's QP failed too, which flushes the receive: it was never taken.
  EXPECT_TRUE(completed(poll_one(p_.cq_b), 100, IBV_WC_WR_FLUSH_ERR));
}

TEST_F(RcErrorsTest, AfterAnErrorOutstandingAndLaterWorkIsFlushed) {
  PairOptions o;
  o.a.rnr_retry = 1;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);
  // The SEND finds no receive and is retried once; the writes queue up behind it.
  ASSERT_EQ(post_send(p_.a, send_wr(1), {src.sge(0, 16)}), 0);
  ASSERT_EQ(
      post_send(p_.a, rdma_wr(2, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge(0, 16)}), 0);
  ASSERT_EQ(
      post_send(p_.a, rdma_wr(3, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge(0, 16)}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1, IBV_WC_RNR_RETRY_EXC_ERR));
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 2, IBV_WC_WR_FLUSH_ERR));
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 3, IBV_WC_WR_FLUSH_ERR));
  ASSERT_EQ(
      post_send(p_.a, rdma_wr(4, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge(0, 16)}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 4, IBV_WC_WR_FLUSH_ERR));
  EXPECT_TRUE(no_completion(p_.cq_a));
  EXPECT_TRUE(dst.all(0)) << "flushed writes must not execute";
}

TEST_F(RcErrorsTest, UnsignalledWorkCompletesWhenItFailsOrIsFlushed) {
  PairOptions o;
  o.sq_sig_all = false;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);
  ASSERT_EQ(
      post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey(), 0), {src.sge(0, 8)}),
      0);
  ASSERT_EQ(post_send(p_.a, rdma_wr(2, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey() ^ 0x5a5a0000u, 0),
                      {src.sge(0, 8)}),
            0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 2, IBV_WC_REM_ACCESS_ERR));
  ASSERT_EQ(
      post_send(p_.a, rdma_wr(3, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey(), 0), {src.sge(0, 8)}),
      0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 3, IBV_WC_WR_FLUSH_ERR));
  EXPECT_TRUE(no_completion(p_.cq_a));
}

TEST_F(RcErrorsTest, DestroyedPeerIsTransportRetryExceeded) {
  PairOptions o;
  o.a.timeout = 10;  // 4 ms
  o.a.retry_cnt = 1;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);
  ASSERT_EQ(post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge(0, 8)}),
            0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1));
  ASSERT_EQ(DestroyQpNow(p_.b), 0);
  ASSERT_EQ(post_send(p_.a, rdma_wr(2, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge(0, 8)}),
            0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 2, IBV_WC_RETRY_EXC_ERR));
  EXPECT_EQ(qp_state(p_.a), IBV_QPS_ERR);
}

// The sender announces the QP it delivers into rather than pinning it (engine/direct_post):
// ibv_destroy_qp must still wait for a delivery under way, so that nothing lands in the QP's
// queues or completes on its CQ once it has returned. Under TSan this also shows the
// delivery and the destruction ordered.
TEST_F(RcErrorsTest, DestroyingTheTargetWhileAnotherThreadSendsEndsEveryDelivery) {
  // Messages long enough (a copy of tens of microseconds) that the destruction nearly always
  // meets one being delivered; every receive takes them into the same buffer.
  constexpr uint32_t kMessage = 1 << 20;
  constexpr uint64_t kReceives = 1024;
  PairOptions o;
  o.a.timeout = 10;  // 4 ms
  o.a.retry_cnt = 1;
  o.caps.recv_wr = kReceives;
  ibv_cq* received = NewCq(2 * kReceives);
  o.b_recv_cq = received;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer src = NewBuffer(kMessage, kRemoteAccess, 1);
  Buffer dst = NewBuffer(kMessage);
  for (uint64_t i = 0; i < kReceives; ++i) ASSERT_EQ(post_recv(p_.b, 1000 + i, {dst.sge()}), 0);
  std::atomic<uint64_t> sent{0};
  std::atomic<int> last_status{IBV_WC_SUCCESS};
  std::thread sender([&] {
    const auto deadline = Clock::now() + Millis{5000};
    while (Clock::now() < deadline && sent < kReceives) {
      if (post_send(p_.a, send_wr(sent + 1), {src.sge()}) != 0) return;
      ibv_wc wc{};
      if (!poll_wc(p_.cq_a, Millis{3000}, &wc)) return;
      last_status = wc.status;
      if (wc.status != IBV_WC_SUCCESS) return;
      ++sent;
    }
  });
  const auto started = Clock::now();
  while (sent < 20 && Clock::now() - started < Millis{3000}) std::this_thread::yield();
  ASSERT_EQ(DestroyQpNow(p_.b), 0);
  // What was delivered before is on the CQ; nothing may follow it.
  ibv_wc wc{};
  uint64_t delivered = 0;
  while (poll_wc(received, Millis{0}, &wc)) ++delivered;
  EXPECT_TRUE(no_completion(received, Millis{50})) << "a SEND landed after ibv_destroy_qp returned";
  sender.join();
  EXPECT_GE(sent.load(), 20u);
  EXPECT_LT(sent.load(), kReceives) << "the sends outlived their target";
  EXPECT_EQ(last_status.load(), IBV_WC_RETRY_EXC_ERR)
      << ibv_wc_status_str(static_cast<ibv_wc_status>(last_status.load()));
  EXPECT_GE(delivered, sent.load()) << "every acknowledged SEND was delivered";
}

TEST_F(RcErrorsTest, DestroyingAQpWithWorkWaitingForRnrIsClean) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  for (uint64_t id = 1; id <= 4; ++id) ASSERT_EQ(post_send(p_.a, send_wr(id), {src.sge(0, 8)}), 0);
  EXPECT_TRUE(no_completion(p_.cq_a, Millis{10}));
  EXPECT_EQ(DestroyQpNow(p_.a), 0);
  EXPECT_TRUE(no_completion(p_.cq_a, Millis{20}));
  EXPECT_TRUE(no_completion(p_.cq_b, Millis{0}));
}

TEST_F(RcErrorsTest, MisalignedAtomicIsInvalidRequest) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer remote = NewBuffer(64, kRemoteAccess, 0);
  Buffer result = NewBuffer(64);
  ASSERT_EQ(
      post_send(p_.a, atomic_wr(1, IBV_WR_ATOMIC_FETCH_AND_ADD, remote.addr(4), remote.rkey(), 1),
                {result.sge(0, 8)}),
      0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1, IBV_WC_REM_INV_REQ_ERR));
  EXPECT_TRUE(remote.all(0)) << "memory unchanged";
  EXPECT_EQ(qp_state(p_.b), IBV_QPS_ERR);
}

TEST_F(RcErrorsTest, AtomicOnRegionWithoutRemoteAtomicIsRemoteAccessError) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer remote = NewBuffer(64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  Buffer result = NewBuffer(64);
  ASSERT_EQ(
      post_send(p_.a, atomic_wr(1, IBV_WR_ATOMIC_FETCH_AND_ADD, remote.addr(), remote.rkey(), 1),
                {result.sge(0, 8)}),
      0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1, IBV_WC_REM_ACCESS_ERR));
  EXPECT_TRUE(remote.all(0));
  ASSERT_NO_FATAL_FAILURE(ExpectResponderAccessError());
}

}  // namespace
}  // namespace softrdma_test

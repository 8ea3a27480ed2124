// SENDs streamed from a fork()ed child into this process's receive queue, as fast as the
// child can post. Most take the same-host fast path (engine/direct_post); whenever the
// receive queue runs dry a SEND waits for a receive on the general path (RNR), and the ones
// after it follow it there. Every message must still land once, in order, in its own
// receive; and a receive region deregistered mid-stream must take nothing more.
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "child_verbs.hpp"

namespace softrdma_test {
namespace {

constexpr uint32_t kSlot = 64;      // bytes per message slot, on both sides
constexpr uint32_t kSlots = 64;     // the parent's receives (its RQ's depth) and the child's slots
constexpr uint32_t kInFlight = 32;  // the child's SENDs not yet completed, at most
static_assert(kInFlight < kSlots, "a send slot is rewritten only after its SEND completed");

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr uint64_t kMessages = 20'000;  // instrumented processes are slower
#else
constexpr uint64_t kMessages = 100'000;
#endif

// Message `seq`: its length (0, or 8 to 64 bytes), opcode and whether it is inline.
uint32_t length_of(uint64_t seq) {
  return seq % 7 == 3 ? 0 : 8 + static_cast<uint32_t>(seq * 13 % 57);
}
bool with_imm(uint64_t seq) {
  return seq % 5 == 0;
}
bool is_inline(uint64_t seq) {
  return seq % 3 == 1;
}
// Its bytes: the sequence number, then its low byte repeated.
void write_message(uint8_t* at, uint64_t seq) {
  std::memset(at, static_cast<uint8_t>(seq), kSlot);
  std::memcpy(at, &seq, sizeof seq);
}
bool holds_message(const uint8_t* at, uint64_t seq) {
  uint8_t expected[kSlot];
  write_message(expected, seq);
  return std::memcmp(at, expected, length_of(seq)) == 0;
}

// The child's side: `count` SENDs (or until one fails), at most kInFlight outstanding; its
// exit status says how it went, the pipe the first failed status.
int stream_sends(Link& link, uint64_t count) {
  ChildVerbs v;
  if (!open_child_verbs(v, kSlot * kSlots, 0)) return child_fail(2, "open");
  Endpoint parent;
  if (!child_connect(link, v, &parent)) return child_fail(3, "connect");
  const auto deadline = Clock::now() + Millis{30000};
  uint64_t posted = 0, completed = 0;
  while (completed < count) {
    if (Clock::now() > deadline) return child_fail(4, "out of time");
    while (posted < count && posted - completed < kInFlight) {
      uint8_t* slot = v.buffer.data() + posted % kSlots * kSlot;
      write_message(slot, posted);
      ibv_send_wr wr = send_wr(posted, with_imm(posted) ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
                               IBV_SEND_SIGNALED | (is_inline(posted) ? IBV_SEND_INLINE : 0));
      wr.imm_data = htonl(static_cast<uint32_t>(posted));
      if (post_send(v.qp, wr,
                    {ibv_sge{reinterpret_cast<uintptr_t>(slot), length_of(posted), v.mr->lkey}}) !=
          0)
        return child_fail(5, "post");
      ++posted;
    }
    ibv_wc wc{};
    if (!poll_wc(v.cq, Millis{5000}, &wc)) return child_fail(6, "no completion");
    if (wc.status != IBV_WC_SUCCESS) return link.send(static_cast<uint32_t>(wc.status)) ? 0 : 7;
    if (wc.wr_id != completed) return child_fail(8, "completions out of order");
    ++completed;
  }
  return link.send(uint32_t{IBV_WC_SUCCESS}) ? 0 : child_fail(9, "pipe");
}

class SendStreamTest : public MultiProcessFixture {
 protected:
  /// Forks the child that streams `count` SENDs, connects to it and posts kSlots receives.
  void StartStream(uint64_t count) {
    child_ = std::make_unique<Child>(link_, [this, count] { return stream_sends(link_, count); });
    ASSERT_TRUE(child_->started());
    receives_ = NewBuffer(kSlot * kSlots, IBV_ACCESS_LOCAL_WRITE, 0);
    ASSERT_NO_FATAL_FAILURE(ConnectToChild(nullptr, RcParams{}, &peer_));
    // The child may already be sending: its first SENDs wait for these (RNR).
    for (uint64_t i = 0; i < kSlots; ++i) ASSERT_NO_FATAL_FAILURE(PostReceive(i));
  }

  /// Takes the first `count` messages, each successfully, posting a receive for each.
  void ReceiveAndRepost(uint64_t count) {
    for (uint64_t seq = 0; seq < count; ++seq) {
      ibv_wc wc{};
      ASSERT_TRUE(poll_wc(cq_, Millis{5000}, &wc)) << "message " << seq << " never arrived";
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status) << " at " << seq;
      ASSERT_NO_FATAL_FAILURE(PostReceive(seq + kSlots));
    }
  }

  void PostReceive(uint64_t wr_id) {
    ASSERT_EQ(post_recv(qp_, wr_id, {receives_.sge(wr_id % kSlots * kSlot, kSlot)}), 0);
  }

  std::unique_ptr<Child> child_;
  Buffer receives_;
  Endpoint peer_;
};

TEST_F(SendStreamTest, EveryMessageLandsOnceInOrderInItsReceiveWhileTheQueueRunsDry) {
  ASSERT_NO_FATAL_FAILURE(StartStream(kMessages));
  for (uint64_t seq = 0; seq < kMessages; ++seq) {
    // Now and then the receiver looks away long enough for its queue to run dry.
    if (seq % 4096 == 100) std::this_thread::sleep_for(Millis{2});
    ibv_wc wc{};
    ASSERT_TRUE(poll_wc(cq_, Millis{5000}, &wc)) << "message " << seq << " never arrived";
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status) << " at " << seq;
    ASSERT_EQ(wc.wr_id, seq) << "receives complete in the order they were posted";
    ASSERT_EQ(wc.opcode, IBV_WC_RECV);
    ASSERT_EQ(wc.byte_len, length_of(seq)) << "message " << seq;
    ASSERT_EQ(wc.qp_num, qp_->qp_num);
    ASSERT_EQ(wc.src_qp, peer_.qpn);
    ASSERT_EQ((wc.wc_flags & IBV_WC_WITH_IMM) != 0, with_imm(seq)) << "message " << seq;
    if (with_imm(seq)) {
      ASSERT_EQ(ntohl(wc.imm_data), seq);
    }
    ASSERT_TRUE(holds_message(receives_.data() + seq % kSlots * kSlot, seq)) << "message " << seq;
    ASSERT_NO_FATAL_FAILURE(PostReceive(seq + kSlots));
  }
  EXPECT_TRUE(no_completion(cq_)) << "a message arrived twice";
  uint32_t status = 0;
  ASSERT_TRUE(link_.receive(&status));
  EXPECT_EQ(status, static_cast<uint32_t>(IBV_WC_SUCCESS))
      << ibv_wc_status_str(static_cast<ibv_wc_status>(status));
  EXPECT_TRUE(exited_with(child_->Wait(Millis{30000}), 0));
}

TEST_F(SendStreamTest, AReceiveRegionDeregisteredMidStreamTakesNothingMore) {
  constexpr uint64_t kBeforeDereg = 2000;
  ASSERT_NO_FATAL_FAILURE(StartStream(UINT64_MAX));
  ASSERT_NO_FATAL_FAILURE(ReceiveAndRepost(kBeforeDereg));
  // The child is still sending; the receives posted stay, naming the region's dead key, and
  // one more is posted (the child may have filled all the others already). The queue holds
  // kSlots: it is full, and the post says ENOMEM, if the child has taken none since the last
  // one (a slow child, waiting out a receiver-not-ready delay).
  const uint32_t dead_key = receives_.lkey();
  ASSERT_EQ(ibv_dereg_mr(receives_.mr.release()), 0);
  receives_.fill(0x5a);  // from here on nothing may write it
  const int extra =
      post_recv(qp_, kBeforeDereg + kSlots, {ibv_sge{receives_.addr(), kSlot, dead_key}});
  ASSERT_TRUE(extra == 0 || extra == ENOMEM) << std::strerror(extra);
  uint32_t status = 0;
  ASSERT_TRUE(link_.receive(&status, Millis{10000})) << "the child's SENDs never failed";
  EXPECT_EQ(status, static_cast<uint32_t>(IBV_WC_REM_OP_ERR))
      << ibv_wc_status_str(static_cast<ibv_wc_status>(status));
  EXPECT_TRUE(exited_with(child_->Wait(), 0));
  EXPECT_TRUE(receives_.all(0x5a)) << "memory written after ibv_dereg_mr returned";

  // What landed before the deregistration completes as it was; the receive that met the
  // dead key fails with a protection error, the rest are flushed.
  std::vector<ibv_wc_status> statuses;
  for (ibv_wc wc{}; poll_wc(cq_, kQuiet, &wc);) statuses.push_back(wc.status);
  ASSERT_EQ(statuses.size(), kSlots + (extra == 0 ? 1 : 0));
  const auto failed = std::find(statuses.begin(), statuses.end(), IBV_WC_LOC_PROT_ERR);
  ASSERT_NE(failed, statuses.end());
  EXPECT_TRUE(
      std::all_of(statuses.begin(), failed, [](ibv_wc_status s) { return s == IBV_WC_SUCCESS; }));
  EXPECT_TRUE(std::all_of(failed + 1, statuses.end(),
                          [](ibv_wc_status s) { return s == IBV_WC_WR_FLUSH_ERR; }));
  EXPECT_EQ(qp_state(qp_), IBV_QPS_ERR);
}

// The child's SENDs take this receive queue as the thread its lock is biased to; the flush
// of a QP moved to ERROR takes it from another process, revoking that bias while SENDs
// arrive. Every receive posted completes exactly once, in posting order: the ones the
// stream reached first successfully, with their own message, the rest flushed.
TEST_F(SendStreamTest, AFlushMidStreamCompletesEveryReceiveOnce) {
  constexpr uint64_t kBeforeFlush = 2000;
  ASSERT_NO_FATAL_FAILURE(StartStream(UINT64_MAX));
  ASSERT_NO_FATAL_FAILURE(ReceiveAndRepost(kBeforeFlush));
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(qp_, &attr, IBV_QP_STATE), 0);

  std::vector<ibv_wc> rest;
  for (ibv_wc wc{}; poll_wc(cq_, kQuiet, &wc);) rest.push_back(wc);
  ASSERT_EQ(rest.size(), kSlots) << "a receive was lost or completed twice";
  size_t delivered = 0;
  while (delivered < rest.size() && rest[delivered].status == IBV_WC_SUCCESS) ++delivered;
  for (size_t i = 0; i < rest.size(); ++i) {
    const uint64_t seq = kBeforeFlush + i;
    EXPECT_EQ(rest[i].wr_id, seq) << "receives complete in the order they were posted";
    if (i < delivered) {
      EXPECT_TRUE(holds_message(receives_.data() + seq % kSlots * kSlot, seq)) << "message " << seq;
    } else {
      EXPECT_EQ(rest[i].status, IBV_WC_WR_FLUSH_ERR) << "at " << seq;
    }
  }
  uint32_t status = 0;
  ASSERT_TRUE(link_.receive(&status, Millis{10000})) << "the child's SENDs never failed";
  EXPECT_NE(status, static_cast<uint32_t>(IBV_WC_SUCCESS));
  EXPECT_TRUE(exited_with(child_->Wait(), 0));
  EXPECT_TRUE(no_completion(cq_));
}

}  // namespace
}  // namespace softrdma_test

// Completion queues: sizes, resizing, completion channels and arming, overrun.
#include <atomic>
#include <thread>
#include <vector>

#include "verbs_fixture.hpp"

namespace softrdma_test {
namespace {

using CqTest = RcLoopbackTest;

TEST_F(CqTest, CreateChecksTheNumberOfEntries) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx(), &attr), 0);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx(), 0, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx(), attr.max_cqe + 1, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx(), 16, nullptr, nullptr, ctx()->num_comp_vectors), nullptr);
  EXPECT_EQ(errno, EINVAL);

  CqPtr largest(ibv_create_cq(ctx(), attr.max_cqe, nullptr, nullptr, 0));
  ASSERT_NE(largest, nullptr) << std::strerror(errno);
  EXPECT_GE(largest->cqe, attr.max_cqe);
  CqPtr small(ibv_create_cq(ctx(), 3, nullptr, nullptr, 0));
  ASSERT_NE(small, nullptr) << std::strerror(errno);
  EXPECT_GE(small->cqe, 3);
}

// UCX and MPI ask for 256 Ki entries by default.
TEST_F(CqTest, AsLargeAsConsumersAskFor) {
  CqPtr cq(ibv_create_cq(ctx(), 256 * 1024, nullptr, nullptr, 0));
  ASSERT_NE(cq, nullptr) << std::strerror(errno);
  EXPECT_GE(cq->cqe, 256 * 1024);
}

// A ring outgrows the room it was created with by moving; peers follow it (the multiprocess
// test), and polls in other threads lose and repeat nothing (below).
TEST_F(CqTest, ResizeGrowsPastTheSizeItWasCreatedWith) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx(), &attr), 0);
  CqPtr cq(ibv_create_cq(ctx(), 100, nullptr, nullptr, 0));
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(ibv_resize_cq(cq.get(), 70000), 0);
  EXPECT_GE(cq->cqe, 70000);
  EXPECT_EQ(ibv_resize_cq(cq.get(), attr.max_cqe), 0);
  EXPECT_GE(cq->cqe, attr.max_cqe);
  EXPECT_EQ(ibv_resize_cq(cq.get(), attr.max_cqe + 1), EINVAL);
  EXPECT_GE(cq->cqe, attr.max_cqe) << "a refused resize leaves the CQ as it was";
  EXPECT_EQ(ibv_resize_cq(cq.get(), 8), 0) << "and it shrinks again";
  EXPECT_GE(cq->cqe, 8);
}

// One thread posts WRITEs and polls their completions, keeping two outstanding, while this
// one grows the CQ fifteen times, each time past its room, so the ring moves under the polls.
TEST_F(CqTest, ARingMovingUnderAnotherThreadsPollsLosesAndRepeatsNothing) {
  ibv_cq* cq = NewCq(2);
  ASSERT_NE(cq, nullptr);
  PairOptions o;
  o.a_send_cq = cq;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);
  constexpr uint64_t kWrites = 20000;
  std::atomic<bool> done{false};
  std::vector<uint64_t> polled;
  polled.reserve(kWrites);
  std::thread poster([&] {
    uint64_t posted = 0;
    const auto deadline = Clock::now() + kTimeout;
    while (polled.size() < kWrites && Clock::now() < deadline) {
      while (posted < kWrites && posted - polled.size() < 2) {
        if (post_send(p_.a, rdma_wr(++posted, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()),
                      {src.sge(0, 8)}) != 0)
          break;
      }
      ibv_wc wc[4];
      const int n = ibv_poll_cq(cq, 4, wc);
      for (int i = 0; i < n; ++i)
        polled.push_back(wc[i].status == IBV_WC_SUCCESS ? wc[i].wr_id : 0);
      if (n < 0) break;
    }
    done = true;
  });
  for (int cqe = 4; cqe <= (1 << 16) && !done; cqe *= 2) {
    EXPECT_EQ(ibv_resize_cq(cq, cqe), 0);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  poster.join();
  ASSERT_EQ(polled.size(), kWrites);
  for (uint64_t i = 0; i < kWrites; ++i) ASSERT_EQ(polled[i], i + 1) << "completion " << i;
  EXPECT_TRUE(no_completion(cq, Millis{0}));
}

// A poll hands a send queue its room back only once the head has passed the entry: a
// requester in another thread that posts the moment it has room finds the ring slot free,
// so a CQ exactly as deep as the send queue never overruns.
TEST_F(CqTest, ASendQueueAsDeepAsItsCqNeverOverrunsItWhilePolledFromAnotherThread) {
  ibv_cq* cq = NewCq(16);
  ASSERT_NE(cq, nullptr);
  PairOptions o;
  o.a_send_cq = cq;
  o.caps.send_wr = static_cast<uint32_t>(cq->cqe);
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(p_.a, &attr, IBV_QP_CAP, &init), 0);
  ASSERT_EQ(attr.cap.max_send_wr, static_cast<uint32_t>(cq->cqe)) << "the test needs them equal";
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);
  constexpr uint64_t kWrites = 20000;
  const uint64_t depth = attr.cap.max_send_wr;
  const auto deadline = Clock::now() + kTimeout;
  std::atomic<uint64_t> posted{0};
  std::atomic<bool> stop{false};
  std::thread poster([&] {
    while (posted < kWrites && !stop && Clock::now() < deadline) {
      const int err = post_send(
          p_.a, rdma_wr(posted + 1, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge(0, 8)});
      if (err == 0) ++posted;
      if (err != 0 && err != ENOMEM) return;  // reported below: fewer completions than posts
    }
  });
  uint64_t polled = 0;
  bool in_order = true;
  while (polled < kWrites && Clock::now() < deadline) {
    // Polled only when the ring is full and the poster is waiting for room: the moment the
    // order of the head and the retirement matters.
    if (posted - polled < depth && posted < kWrites) continue;
    ibv_wc wc[8];
    const int n = ibv_poll_cq(cq, 8, wc);
    if (n < 0) break;
    for (int i = 0; i < n; ++i) in_order &= completed(wc[i], ++polled);
  }
  stop = true;
  poster.join();
  EXPECT_EQ(polled, kWrites);
  EXPECT_TRUE(in_order);
  EXPECT_FALSE(wait_readable(ctx()->async_fd, Millis{0})) << "an asynchronous event (CQ overrun)";
}

// An application asleep in ibv_get_cq_event has only the helper thread to retry its
// RNR-delayed send. Arming the CQ tells the helper so, and it retries at the RNR timer's time
// (10 us here) rather than after the grace it leaves a polling application (5 ms): the
// completion follows the receive within a fraction of that grace.
TEST_F(CqTest, AnApplicationAsleepInAnEventHasItsRnrRetriesRunAtTheirTime) {
  ibv_comp_channel* channel = NewChannel();
  ibv_cq* cq = NewCq(16, channel);
  ASSERT_NE(cq, nullptr);
  PairOptions o;
  o.a_send_cq = cq;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer buf = NewBuffer(64);
  auto best = Clock::duration::max();
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
    ASSERT_EQ(post_send(p_.a, send_wr(id), {buf.sge(0, 8)}), 0);  // no receive yet: RNR
    std::atomic<Clock::rep> received{0};
    std::thread receiver([&] {
      std::this_thread::sleep_for(Millis(6));
      received = Clock::now().time_since_epoch().count();
      EXPECT_EQ(post_recv(p_.b, id, {buf.sge(8, 8)}), 0);
    });
    ibv_cq* event_cq = nullptr;
    void* context = nullptr;
    const bool woke =
        wait_readable(channel->fd, kTimeout) && ibv_get_cq_event(channel, &event_cq, &context) == 0;
    const auto woke_at = Clock::now();
    receiver.join();
    ASSERT_TRUE(woke);
    ibv_ack_cq_events(event_cq, 1);
    ASSERT_TRUE(completed(poll_one(cq), id));
    ASSERT_TRUE(completed(poll_one(p_.cq_b), id));
    best = std::min(best, woke_at - Clock::time_point(Clock::duration(received.load())));
  }
  EXPECT_LT(best, Millis(2)) << "from the receive to the send's completion, best of three";
}

TEST_F(CqTest, DestroyWhileAQpUsesItIsEbusy) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  EXPECT_EQ(DestroyCqNow(p_.cq_a), EBUSY);
  ASSERT_EQ(DestroyQpNow(p_.a), 0);
  EXPECT_EQ(DestroyCqNow(p_.cq_a), 0);
}

TEST_F(CqTest, PollReturnsSeveralCompletionsInOrder) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);
  for (uint64_t id = 1; id <= 5; ++id)
    ASSERT_EQ(
        post_send(p_.a, rdma_wr(id, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge(0, 8)}),
        0);
  ASSERT_EQ(poll_n(p_.cq_a, 0).size(), 0u);
  ibv_wc wcs[16];
  int got = 0;
  const auto deadline = Clock::now() + kTimeout;
  while (got < 5 && Clock::now() < deadline) {
    const int n = ibv_poll_cq(p_.cq_a, 16 - got, wcs + got);
    ASSERT_GE(n, 0);
    got += n;
  }
  ASSERT_EQ(got, 5);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(completed(wcs[i], static_cast<uint64_t>(i + 1)));
  EXPECT_EQ(ibv_poll_cq(p_.cq_a, 16, wcs), 0);
}

TEST_F(CqTest, ResizeKeepsPendingCompletions) {
  ibv_cq* cq = NewCq(4);
  ASSERT_NE(cq, nullptr);
  EXPECT_GE(cq->cqe, 4);
  PairOptions o;
  o.a_send_cq = cq;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);
  auto write = [&](uint64_t wr_id) {
    return post_send(p_.a, rdma_wr(wr_id, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()),
                     {src.sge(0, 8)});
  };
  // Move the ring's head off zero so that the pending entries wrap around.
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_EQ(write(id), 0);
  for (uint64_t id = 1; id <= 3; ++id) EXPECT_TRUE(completed(poll_one(cq), id));
  for (uint64_t id = 4; id <= 6; ++id) ASSERT_EQ(write(id), 0);

  EXPECT_EQ(ibv_resize_cq(cq, 2), EINVAL) << "3 completions do not fit in 2 entries";
  EXPECT_EQ(ibv_resize_cq(cq, 0), EINVAL);
  ASSERT_EQ(ibv_resize_cq(cq, 64), 0);
  EXPECT_GE(cq->cqe, 64);
  for (uint64_t id = 4; id <= 6; ++id) EXPECT_TRUE(completed(poll_one(cq), id));

  // The new size is usable: 40 completions wait without overrunning.
  for (uint64_t id = 10; id < 50; ++id) ASSERT_EQ(write(id), 0);
  const std::vector<ibv_wc> wcs = poll_n(cq, 40);
  ASSERT_EQ(wcs.size(), 40u);
  for (size_t i = 0; i < wcs.size(); ++i) EXPECT_TRUE(completed(wcs[i], 10 + i));
  EXPECT_TRUE(no_completion(cq, Millis{0}));
  EXPECT_FALSE(next_async_event(ctx(), Millis{0})) << "no CQ error: nothing overran";
}

TEST_F(CqTest, CompletionChannelWakesPollAndReportsTheCq) {
  int cq_context = 0;
  ibv_comp_channel* channel = NewChannel();
  ASSERT_NE(channel, nullptr);
  ibv_cq* cq = NewCq(16, channel, &cq_context);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(cq->channel, channel);
  PairOptions o;
  o.a_send_cq = cq;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);

  ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
  EXPECT_FALSE(wait_readable(channel->fd, Millis{0}));
  ASSERT_EQ(post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge(0, 8)}),
            0);
  ASSERT_TRUE(wait_readable(channel->fd, kTimeout));
  ibv_cq* event_cq = nullptr;
  void* event_context = nullptr;
  ASSERT_EQ(ibv_get_cq_event(channel, &event_cq, &event_context), 0);
  EXPECT_EQ(event_cq, cq);
  EXPECT_EQ(event_context, &cq_context);
  ibv_ack_cq_events(cq, 1);
  EXPECT_TRUE(completed(poll_one(cq), 1));

  // Not re-armed: the next completion raises no event.
  ASSERT_EQ(post_send(p_.a, rdma_wr(2, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge(0, 8)}),
            0);
  EXPECT_TRUE(completed(poll_one(cq), 2));
  EXPECT_FALSE(wait_readable(channel->fd, kQuiet));

  // The channel outlives its CQs.
  EXPECT_EQ(DestroyChannelNow(channel), EBUSY);
  ASSERT_EQ(DestroyQpNow(p_.a), 0);
  EXPECT_EQ(DestroyCqNow(cq), 0);
  EXPECT_EQ(DestroyChannelNow(channel), 0);
}

TEST_F(CqTest, ChannelSharedByTwoCqsReportsTheOneThatCompleted) {
  ibv_comp_channel* channel = NewChannel();
  ASSERT_NE(channel, nullptr);
  int first_context = 1, second_context = 2;
  ibv_cq* first = NewCq(16, channel, &first_context);
  ibv_cq* second = NewCq(16, channel, &second_context);
  ASSERT_TRUE(first && second);
  PairOptions o;
  o.a_send_cq = second;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);
  ASSERT_EQ(ibv_req_notify_cq(first, 0), 0);
  ASSERT_EQ(ibv_req_notify_cq(second, 0), 0);
  ASSERT_EQ(post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge(0, 8)}),
            0);
  ASSERT_TRUE(wait_readable(channel->fd, kTimeout));
  ibv_cq* event_cq = nullptr;
  void* event_context = nullptr;
  ASSERT_EQ(ibv_get_cq_event(channel, &event_cq, &event_context), 0);
  EXPECT_EQ(event_cq, second);
  EXPECT_EQ(event_context, &second_context);
  ibv_ack_cq_events(event_cq, 1);
  EXPECT_FALSE(wait_readable(channel->fd, Millis{10})) << "one completion, one event";
  EXPECT_TRUE(completed(poll_one(second), 1));
  EXPECT_TRUE(no_completion(first, Millis{0}));
}

TEST_F(CqTest, SolicitedOnlyArmingWakesOnlyForSolicitedReceives) {
  ibv_comp_channel* channel = NewChannel();
  ASSERT_NE(channel, nullptr);
  ibv_cq* recv_cq = NewCq(16, channel);
  ASSERT_NE(recv_cq, nullptr);
  PairOptions o;
  o.b_recv_cq = recv_cq;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(128);
  ASSERT_EQ(post_recv(p_.b, 10, {dst.sge(0, 64)}), 0);
  ASSERT_EQ(post_recv(p_.b, 11, {dst.sge(64, 64)}), 0);

  ASSERT_EQ(ibv_req_notify_cq(recv_cq, 1), 0);
  ASSERT_EQ(post_send(p_.a, send_wr(1), {src.sge(0, 16)}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1));
  EXPECT_FALSE(wait_readable(channel->fd, kQuiet)) << "woken by an unsolicited SEND";

  ASSERT_EQ(post_send(p_.a, send_wr(2, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_SOLICITED),
                      {src.sge(0, 16)}),
            0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 2));
  ASSERT_TRUE(wait_readable(channel->fd, kTimeout)) << "not woken by a solicited SEND";
  ibv_cq* event_cq = nullptr;
  void* event_context = nullptr;
  ASSERT_EQ(ibv_get_cq_event(channel, &event_cq, &event_context), 0);
  EXPECT_EQ(event_cq, recv_cq);
  ibv_ack_cq_events(recv_cq, 1);

  const std::vector<ibv_wc> wcs = poll_n(recv_cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_TRUE(completed(wcs[0], 10));
  EXPECT_TRUE(completed(wcs[1], 11));
}

// Only receive completions of solicited messages (and error completions) are solicited: a
// successful send completion on a CQ armed for solicited events raises no event.
TEST_F(CqTest, SolicitedOnlyArmingIgnoresSuccessfulSendCompletions) {
  ibv_comp_channel* channel = NewChannel();
  ASSERT_NE(channel, nullptr);
  ibv_cq* cq = NewCq(16, channel);
  ASSERT_NE(cq, nullptr);
  PairOptions o;
  o.a_send_cq = cq;
  o.a_recv_cq = cq;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);

  ASSERT_EQ(ibv_req_notify_cq(cq, 1), 0);
  ASSERT_EQ(post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge(0, 8)}),
            0);
  EXPECT_FALSE(wait_readable(channel->fd, kQuiet))
      << "a successful send completion woke a CQ armed with ibv_req_notify_cq(cq, 1)";
  EXPECT_TRUE(completed(poll_one(cq), 1));

  // Still armed: a solicited SEND from b wakes it.
  ASSERT_EQ(post_recv(p_.a, 20, {dst.sge(0, 64)}), 0);
  ASSERT_EQ(post_send(p_.b, send_wr(2, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_SOLICITED),
                      {src.sge(0, 16)}),
            0);
  EXPECT_TRUE(completed(poll_one(p_.cq_b), 2));
  ASSERT_TRUE(wait_readable(channel->fd, kTimeout));
  ibv_cq* event_cq = nullptr;
  void* event_context = nullptr;
  ASSERT_EQ(ibv_get_cq_event(channel, &event_cq, &event_context), 0);
  EXPECT_EQ(event_cq, cq);
  ibv_ack_cq_events(cq, 1);
  EXPECT_TRUE(completed(poll_one(cq), 20));
}

TEST_F(CqTest, OverrunRaisesCqErrorEvent) {
  ibv_cq* small = NewCq(1);
  ASSERT_NE(small, nullptr);
  ASSERT_GE(small->cqe, 1);
  const uint64_t overflowing = static_cast<uint64_t>(small->cqe) + 1;
  PairOptions o;
  o.a_send_cq = small;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);

  EXPECT_FALSE(wait_readable(ctx()->async_fd, Millis{0}));
  for (uint64_t id = 1; id <= overflowing; ++id)
    ASSERT_EQ(
        post_send(p_.a, rdma_wr(id, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge(0, 8)}),
        0);
  ASSERT_TRUE(wait_readable(ctx()->async_fd, kTimeout)) << "async fd not readable";
  const std::optional<ibv_async_event> event = next_async_event(ctx(), kTimeout);
  ASSERT_TRUE(event);
  EXPECT_EQ(event->event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(event->element.cq, small);
}

// A destroyed CQ's memory is cleared for the next object there: slots it filled carry
// stamps (the positions they held), and a new ring reading one as written would return a
// completion that never happened. A few pages are cleared by hand and kept, more go back
// to tmpfs; both must leave nothing for the new CQ to find.
struct ReuseCase {
  const char* name;
  int before;  // completions written into the destroyed CQ
  int after;   // completions written into the new one, fewer: the next slot is stale
};

class CqMemoryReuse : public RcLoopbackTest, public ::testing::WithParamInterface<ReuseCase> {
 protected:
  static constexpr int kCqe = 4096;

  // Writes `count` completions through a new pair whose sender completes into `cq`, polls
  // them all, and destroys the sender.
  void Complete(ibv_cq* cq, int count) {
    PairOptions o;
    o.a_send_cq = cq;
    RcPair pair;
    ASSERT_NO_FATAL_FAILURE(MakePair(o, &pair));
    Buffer src = NewBuffer(64, kRemoteAccess, 1);
    Buffer dst = NewBuffer(64);
    const int batch = static_cast<int>(QpCaps{}.send_wr);
    for (int done = 0; done < count;) {
      const int n = std::min(batch, count - done);
      for (int i = 0; i < n; ++i)
        ASSERT_EQ(post_send(pair.a,
                            rdma_wr(static_cast<uint64_t>(done + i), IBV_WR_RDMA_WRITE, dst.addr(),
                                    dst.rkey()),
                            {src.sge(0, 8)}),
                  0);
      ASSERT_EQ(poll_n(cq, static_cast<size_t>(n)).size(), static_cast<size_t>(n));
      done += n;
    }
    ASSERT_EQ(DestroyQpNow(pair.a), 0);
  }
};

TEST_P(CqMemoryReuse, ANewCqWhereADestroyedOneWasFindsNothingLeft) {
  ibv_cq* first = NewCq(kCqe);
  ASSERT_NE(first, nullptr);
  ASSERT_NO_FATAL_FAILURE(Complete(first, GetParam().before));
  const uint32_t handle = first->handle;
  ASSERT_EQ(DestroyCqNow(first), 0);

  ibv_cq* second = NewCq(kCqe);
  ASSERT_NE(second, nullptr);
  ASSERT_EQ(second->handle, handle) << "the new CQ is not where the old one was";
  ASSERT_NO_FATAL_FAILURE(Complete(second, GetParam().after));
  ibv_wc wc[4];
  EXPECT_EQ(ibv_poll_cq(second, 4, wc), 0);
}

INSTANTIATE_TEST_SUITE_P(Rings, CqMemoryReuse,
                         ::testing::Values(ReuseCase{"few_pages_kept", 400, 300},
                                           ReuseCase{"many_pages_given_back", 3000, 2000}),
                         CaseName{});

}  // namespace
}  // namespace softrdma_test

// The poll-mode data path: batches with one doorbell, selective signalling, room accounting.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "loopback_pair.hpp"
#include "rdmakit/poll_queue_pair.hpp"

namespace rdmakit {
namespace {

struct Memory {
  explicit Memory(const ProtectionDomain& pd)
      : bytes(1 << 16), mr(pd.register_memory(bytes.data(), bytes.size(), Access::all)) {}
  std::vector<std::byte> bytes;
  MemoryRegion mr;
};

TEST(PollMode, ABatchIsPostedOnceAndOnlyPartlySignalled) {
  testing::LoopbackPair p;
  Memory m(p.pd);
  PollQueuePair pq(p.a, 8);
  const uint32_t depth = p.a.caps().send_depth;
  ASSERT_GE(depth, 64u);
  for (uint32_t i = 0; i < 64; ++i) {
    m.bytes[i] = std::byte(i + 1);
    ASSERT_TRUE(pq.write(m.mr.local().subspan(i, 1), m.mr.remote().subspan(32768 + i, 1), i));
  }
  EXPECT_EQ(pq.queued(), 64u);
  EXPECT_EQ(pq.room(), depth - 64);
  ASSERT_FALSE(pq.post());
  EXPECT_EQ(pq.outstanding(), 64u);
  // 64 requests, every 8th signalled: 8 completions retire all of them.
  uint32_t completions = 0, retired = 0;
  std::array<ibv_wc, 16> wcs;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (retired < 64 && std::chrono::steady_clock::now() < deadline) {
    const int n = p.cq_a.poll(wcs);
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(wcs[static_cast<size_t>(i)].status, IBV_WC_SUCCESS);
      EXPECT_EQ(wcs[static_cast<size_t>(i)].wr_id % 8, 7u);  // the signalled ones
      retired += pq.retire(wcs[static_cast<size_t>(i)]);
      ++completions;
    }
  }
  EXPECT_EQ(completions, 8u);
  EXPECT_EQ(retired, 64u);
  EXPECT_EQ(pq.outstanding(), 0u);
  for (uint32_t i = 0; i < 64; ++i) EXPECT_EQ(m.bytes[32768 + i], std::byte(i + 1));
}

TEST(PollMode, AFullSendQueueRefusesMoreUntilCompletionsRetireSome) {
  testing::LoopbackPair p;
  QueuePair small = QpBuilder(p.ctx, p.pd, p.cq_a).send_depth(4).build();
  QueuePair peer = QpBuilder(p.ctx, p.pd, p.cq_b).build();
  small.connect(peer.address(), {IBV_MTU_4096, 4, 4});
  peer.connect(small.address(), {IBV_MTU_4096, 4, 4});
  Memory m(p.pd);
  PollQueuePair pq(small);
  const uint32_t depth = small.caps().send_depth;
  for (uint32_t i = 0; i < depth; ++i)
    EXPECT_TRUE(pq.write(m.mr.local().first(8), m.mr.remote().last(8)));
  EXPECT_FALSE(pq.write(m.mr.local().first(8), m.mr.remote().last(8)));
  ASSERT_FALSE(pq.post());
  EXPECT_EQ(pq.room(), 0u);
  uint32_t retired = 0;
  while (retired < depth) {
    ibv_wc wc = testing::LoopbackPair::wait_one(p.cq_a);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    retired += pq.retire(wc);
  }
  EXPECT_EQ(pq.room(), depth);
}

TEST(PollMode, AtomicsAndReadsInOneBatch) {
  testing::LoopbackPair p;
  Memory m(p.pd);
  PollQueuePair pq(p.a);
  uint64_t counter = 40;
  std::memcpy(m.bytes.data() + 4096, &counter, 8);
  ASSERT_TRUE(pq.fetch_add(m.mr.local().subspan(0, 8), m.mr.remote().subspan(4096, 8), 2));
  ASSERT_TRUE(pq.compare_swap(m.mr.local().subspan(8, 8), m.mr.remote().subspan(4096, 8), 42, 7));
  ASSERT_TRUE(pq.read(m.mr.local().subspan(16, 8), m.mr.remote().subspan(4096, 8), 99));
  ASSERT_FALSE(pq.post());
  ibv_wc wc = testing::LoopbackPair::wait_one(p.cq_a);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 99u);  // the last of the batch is the signalled one
  EXPECT_EQ(pq.retire(wc), 3u);
  uint64_t fetched, swapped, read_back;
  std::memcpy(&fetched, m.bytes.data(), 8);
  std::memcpy(&swapped, m.bytes.data() + 8, 8);
  std::memcpy(&read_back, m.bytes.data() + 16, 8);
  EXPECT_EQ(fetched, 40u);
  EXPECT_EQ(swapped, 42u);
  EXPECT_EQ(read_back, 7u);
}

TEST(PollMode, AFailedBatchFlushesEveryRequest) {
  testing::LoopbackPair p;
  Memory m(p.pd);
  PollQueuePair pq(p.a, 100);
  RemoteBuffer forged(reinterpret_cast<uintptr_t>(m.bytes.data()), 8, m.mr.rkey() ^ 1);
  ASSERT_TRUE(pq.write(m.mr.local().first(8), forged));
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(pq.write(m.mr.local().first(8), m.mr.remote().last(8)));
  ASSERT_FALSE(pq.post());
  uint32_t retired = 0;
  int errors = 0;
  while (retired < 10) {
    ibv_wc wc = testing::LoopbackPair::wait_one(p.cq_a);
    ASSERT_NE(wc.wr_id, ~0ull) << "a request never completed";
    errors += wc.status != IBV_WC_SUCCESS;
    retired += pq.retire(wc);
  }
  EXPECT_EQ(errors, 10);  // the bad one, then nine flushed
  EXPECT_TRUE(pq.failed());
  EXPECT_EQ(pq.outstanding(), 0u);
}

// Requests posted on the QP behind the PollQueuePair's back fill the send queue, so the
// device refuses a batch part-way: what it took still retires exactly, with the requests
// after its last signalled one covered by the next batch's first signalled one.
TEST(PollMode, ABatchRefusedPartWayStillRetiresWhatWasPosted) {
  testing::LoopbackPair p;
  Memory m(p.pd);
  PollQueuePair pq(p.a, 3);
  const uint32_t depth = p.a.caps().send_depth;
  constexpr uint64_t kOutside = 1000;
  ibv_sge sge = m.mr.local().first(8).sge();
  ibv_send_wr outside{};
  outside.wr_id = kOutside;
  outside.sg_list = &sge;
  outside.num_sge = 1;
  outside.opcode = IBV_WR_RDMA_WRITE;
  outside.send_flags = IBV_SEND_SIGNALED;
  outside.wr.rdma = {m.mr.remote().last(8).address(), m.mr.rkey()};
  uint32_t outside_posted = 0, outside_done = 0, retired = 0;
  auto drain = [&](uint32_t retired_by_then) {  // and every outside request completed
    while (outside_done < outside_posted || retired < retired_by_then) {
      const ibv_wc wc = testing::LoopbackPair::wait_one(p.cq_a);
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
      if (wc.wr_id == kOutside)
        ++outside_done;
      else
        retired += pq.retire(wc);
    }
  };
  for (; outside_posted < depth - 5; ++outside_posted) ASSERT_FALSE(p.a.post_send(outside));

  // Eight requests, every third signalled (and the last): the device takes five.
  for (uint64_t i = 0; i < 8; ++i)
    ASSERT_TRUE(pq.write(m.mr.local().first(8), m.mr.remote().subspan(4096, 8), i));
  EXPECT_EQ(pq.post(), std::errc::not_enough_memory);
  EXPECT_EQ(pq.queued(), 0u);
  EXPECT_EQ(pq.outstanding(), 5u);
  drain(3);
  EXPECT_EQ(retired, 3u);  // the signalled third; the fourth and fifth wait for the next
  EXPECT_EQ(pq.outstanding(), 2u);

  // A batch refused whole keeps the run that is still uncovered.
  while (outside_posted < 2 * depth && !p.a.post_send(outside)) ++outside_posted;
  ASSERT_TRUE(pq.write(m.mr.local().first(8), m.mr.remote().subspan(4096, 8), 8));
  EXPECT_EQ(pq.post(), std::errc::not_enough_memory);
  EXPECT_EQ(pq.outstanding(), 2u);
  drain(3);

  ASSERT_TRUE(pq.write(m.mr.local().first(8), m.mr.remote().subspan(4096, 8), 9));
  ASSERT_FALSE(pq.post());
  const ibv_wc wc = testing::LoopbackPair::wait_one(p.cq_a);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 9u);
  EXPECT_EQ(pq.retire(wc), 3u);
  EXPECT_EQ(pq.outstanding(), 0u);
  EXPECT_FALSE(pq.failed());
}

}  // namespace
}  // namespace rdmakit

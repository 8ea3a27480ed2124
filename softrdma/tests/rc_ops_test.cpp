// Operations on a connected RC loopback pair: sends, RDMA writes and reads, atomics, inline
// data, scatter/gather, signalling and ordering.
#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <bit>
#include <thread>
#include <vector>

#include "verbs_fixture.hpp"

namespace softrdma_test {
namespace {

class RcOpsTest : public RcLoopbackTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(RcLoopbackTest::SetUp());
    ASSERT_NO_FATAL_FAILURE(ConnectPair());
  }
};

void fill_pattern(const Buffer& b, uint8_t seed) {
  for (size_t i = 0; i < b.size; ++i) b.data()[i] = static_cast<uint8_t>(seed + i * 7);
}

TEST_F(RcOpsTest, Send) {
  Buffer src = NewBuffer(256);
  Buffer dst = NewBuffer(256, kRemoteAccess, 0xee);
  fill_pattern(src, 3);
  ASSERT_EQ(post_recv(p_.b, 100, {dst.sge()}), 0);
  ASSERT_EQ(post_send(p_.a, send_wr(1), {src.sge(0, 200)}), 0);

  const ibv_wc s = poll_one(p_.cq_a);
  EXPECT_TRUE(completed(s, 1));
  EXPECT_EQ(s.opcode, IBV_WC_SEND);
  EXPECT_EQ(s.qp_num, p_.a->qp_num);
  const ibv_wc r = poll_one(p_.cq_b);
  EXPECT_TRUE(completed(r, 100));
  EXPECT_EQ(r.opcode, IBV_WC_RECV);
  EXPECT_EQ(r.byte_len, 200u);
  EXPECT_EQ(r.qp_num, p_.b->qp_num);
  EXPECT_EQ(r.wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), 200), 0);
  EXPECT_TRUE(dst.all(0xee, 200, 56)) << "bytes past the message are untouched";
}

TEST_F(RcOpsTest, SendWithImmediate) {
  Buffer src = NewBuffer(64, kRemoteAccess, 0x31);
  Buffer dst = NewBuffer(64);
  ASSERT_EQ(post_recv(p_.b, 100, {dst.sge()}), 0);
  ibv_send_wr wr = send_wr(1, IBV_WR_SEND_WITH_IMM);
  wr.imm_data = htonl(0x12345678);
  ASSERT_EQ(post_send(p_.a, wr, {src.sge(0, 10)}), 0);

  const ibv_wc s = poll_one(p_.cq_a);
  EXPECT_TRUE(completed(s, 1));
  EXPECT_EQ(s.opcode, IBV_WC_SEND);
  const ibv_wc r = poll_one(p_.cq_b);
  EXPECT_TRUE(completed(r, 100));
  EXPECT_EQ(r.opcode, IBV_WC_RECV);
  EXPECT_NE(r.wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(r.imm_data, htonl(0x12345678)) << "immediate data stays in network order";
  EXPECT_EQ(r.byte_len, 10u);
  EXPECT_TRUE(dst.all(0x31, 0, 10));
}

TEST_F(RcOpsTest, RdmaWrite) {
  Buffer src = NewBuffer(4096);
  Buffer dst = NewBuffer(8192, kRemoteAccess, 0);
  fill_pattern(src, 9);
  ASSERT_EQ(post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_WRITE, dst.addr(1000), dst.rkey()),
                      {src.sge(0, 4096)}),
            0);
  const ibv_wc s = poll_one(p_.cq_a);
  EXPECT_TRUE(completed(s, 1));
  EXPECT_EQ(s.opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(std::memcmp(dst.data() + 1000, src.data(), 4096), 0);
  EXPECT_TRUE(dst.all(0, 0, 1000));
  EXPECT_TRUE(dst.all(0, 5096, 8192 - 5096));
  EXPECT_TRUE(no_completion(p_.cq_b)) << "a write consumes nothing at the responder";
}

TEST_F(RcOpsTest, RdmaWriteWithImmediateConsumesAReceive) {
  Buffer src = NewBuffer(128, kRemoteAccess, 0x42);
  Buffer dst = NewBuffer(256, kRemoteAccess, 0);
  ASSERT_EQ(post_recv(p_.b, 100), 0);  // no scatter list needed: the data goes to the address
  ibv_send_wr wr = rdma_wr(1, IBV_WR_RDMA_WRITE_WITH_IMM, dst.addr(64), dst.rkey());
  wr.imm_data = htonl(0xcafe);
  ASSERT_EQ(post_send(p_.a, wr, {src.sge(0, 100)}), 0);

  const ibv_wc s = poll_one(p_.cq_a);
  EXPECT_TRUE(completed(s, 1));
  EXPECT_EQ(s.opcode, IBV_WC_RDMA_WRITE);
  const ibv_wc r = poll_one(p_.cq_b);
  EXPECT_TRUE(completed(r, 100));
  EXPECT_EQ(r.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_NE(r.wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(r.imm_data, htonl(0xcafe));
  EXPECT_EQ(r.byte_len, 100u);
  EXPECT_TRUE(dst.all(0x42, 64, 100));
  EXPECT_TRUE(dst.all(0, 0, 64));
  EXPECT_TRUE(dst.all(0, 164, 92));
}

TEST_F(RcOpsTest, RdmaRead) {
  Buffer remote = NewBuffer(4096);
  Buffer local = NewBuffer(4096, kRemoteAccess, 0xff);
  fill_pattern(remote, 77);
  ASSERT_EQ(post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_READ, remote.addr(100), remote.rkey()),
                      {local.sge(8, 3000)}),
            0);
  const ibv_wc s = poll_one(p_.cq_a);
  EXPECT_TRUE(completed(s, 1));
  EXPECT_EQ(s.opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(s.byte_len, 3000u);
  EXPECT_EQ(std::memcmp(local.data() + 8, remote.data() + 100, 3000), 0);
  EXPECT_TRUE(local.all(0xff, 0, 8));
  EXPECT_TRUE(local.all(0xff, 3008, 4096 - 3008));
}

TEST_F(RcOpsTest, FetchAndAdd) {
  Buffer remote = NewBuffer(64);
  Buffer result = NewBuffer(64, kRemoteAccess, 0xff);
  uint64_t initial = 0x100000000ull + 5;
  std::memcpy(remote.data() + 8, &initial, 8);
  ASSERT_EQ(post_send(p_.a,
                      atomic_wr(1, IBV_WR_ATOMIC_FETCH_AND_ADD, remote.addr(8), remote.rkey(),
                                0xffffffffull),
                      {result.sge(16, 8)}),
            0);
  const ibv_wc s = poll_one(p_.cq_a);
  EXPECT_TRUE(completed(s, 1));
  EXPECT_EQ(s.opcode, IBV_WC_FETCH_ADD);
  EXPECT_EQ(s.byte_len, 8u);
  uint64_t original = 0, now = 0;
  std::memcpy(&original, result.data() + 16, 8);
  std::memcpy(&now, remote.data() + 8, 8);
  EXPECT_EQ(original, initial);
  EXPECT_EQ(now, initial + 0xffffffffull);
  EXPECT_TRUE(result.all(0xff, 0, 16));
  EXPECT_TRUE(remote.all(0, 0, 8));
  EXPECT_TRUE(remote.all(0, 16, 48));
}

TEST_F(RcOpsTest, CompareAndSwap) {
  Buffer remote = NewBuffer(64);
  Buffer result = NewBuffer(64);
  const uint64_t initial = 0x1111222233334444ull;
  std::memcpy(remote.data(), &initial, 8);

  // The comparison fails: memory keeps its value, the original comes back.
  ASSERT_EQ(post_send(p_.a,
                      atomic_wr(1, IBV_WR_ATOMIC_CMP_AND_SWP, remote.addr(), remote.rkey(),
                                /*compare=*/42, /*swap=*/7),
                      {result.sge(0, 8)}),
            0);
  ibv_wc s = poll_one(p_.cq_a);
  EXPECT_TRUE(completed(s, 1));
  EXPECT_EQ(s.opcode, IBV_WC_COMP_SWAP);
  uint64_t original = 0, now = 0;
  std::memcpy(&original, result.data(), 8);
  std::memcpy(&now, remote.data(), 8);
  EXPECT_EQ(original, initial);
  EXPECT_EQ(now, initial);

  // The comparison succeeds: memory takes the swap value.
  ASSERT_EQ(post_send(p_.a,
                      atomic_wr(2, IBV_WR_ATOMIC_CMP_AND_SWP, remote.addr(), remote.rkey(), initial,
                                0xabcdull),
                      {result.sge(8, 8)}),
            0);
  s = poll_one(p_.cq_a);
  EXPECT_TRUE(completed(s, 2));
  EXPECT_EQ(s.opcode, IBV_WC_COMP_SWAP);
  std::memcpy(&original, result.data() + 8, 8);
  std::memcpy(&now, remote.data(), 8);
  EXPECT_EQ(original, initial);
  EXPECT_EQ(now, 0xabcdull);
}

// IBV_ATOMIC_HCA: atomics from several QPs on one word do not lose updates.
TEST_F(RcOpsTest, ConcurrentFetchAndAddsFromTwoQpsAreAtomic) {
  constexpr uint64_t kPerThread = 500;
  RcPair second;
  ASSERT_NO_FATAL_FAILURE(MakePair({}, &second));
  Buffer word = NewBuffer(64);
  Buffer results = NewBuffer(2 * kPerThread * 8);
  std::vector<uint64_t> seen[2];
  auto run = [&](int t, ibv_qp* qp, ibv_cq* cq) {
    for (uint64_t i = 0; i < kPerThread; ++i) {
      const size_t slot = (static_cast<size_t>(t) * kPerThread + i) * 8;
      if (post_send(qp, atomic_wr(i, IBV_WR_ATOMIC_FETCH_AND_ADD, word.addr(), word.rkey(), 1),
                    {results.sge(slot, 8)}) != 0)
        return;
      ibv_wc wc{};
      if (!poll_wc(cq, kTimeout, &wc) || wc.status != IBV_WC_SUCCESS) return;
      uint64_t before = 0;
      std::memcpy(&before, results.data() + slot, 8);
      seen[t].push_back(before);
    }
  };
  std::thread other(run, 1, second.a, second.cq_a);
  run(0, p_.a, p_.cq_a);
  other.join();
  ASSERT_EQ(seen[0].size(), kPerThread);
  ASSERT_EQ(seen[1].size(), kPerThread);
  uint64_t total = 0;
  std::memcpy(&total, word.data(), 8);
  EXPECT_EQ(total, 2 * kPerThread);
  // Every fetched value is distinct: each add saw the result of all earlier ones.
  std::vector<uint64_t> all = seen[0];
  all.insert(all.end(), seen[1].begin(), seen[1].end());
  std::sort(all.begin(), all.end());
  for (uint64_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], i);
}

// Inline data is read at post time, from memory that need not be registered.
TEST_F(RcOpsTest, InlineSendDeliversThePayload) {
  Buffer dst = NewBuffer(64);
  std::array<uint8_t, 48> payload;
  payload.fill(0x6b);
  ASSERT_EQ(post_recv(p_.b, 100, {dst.sge()}), 0);
  const ibv_sge sge{reinterpret_cast<uintptr_t>(payload.data()), 48, 0};
  ASSERT_EQ(post_send(p_.a, send_wr(1, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_INLINE), {sge}),
            0);
  payload.fill(0);  // reusable as soon as the post returns
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1));
  const ibv_wc r = poll_one(p_.cq_b);
  EXPECT_TRUE(completed(r, 100));
  EXPECT_EQ(r.byte_len, 48u);
  EXPECT_TRUE(dst.all(0x6b, 0, 48));
}

TEST_F(RcOpsTest, InlineRdmaWriteDeliversThePayload) {
  Buffer dst = NewBuffer(64);
  std::array<uint8_t, 32> payload;
  payload.fill(0x5c);
  const ibv_sge sge{reinterpret_cast<uintptr_t>(payload.data()), 32, 0};
  ASSERT_EQ(post_send(p_.a,
                      rdma_wr(1, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey(),
                              IBV_SEND_SIGNALED | IBV_SEND_INLINE),
                      {sge}),
            0);
  payload.fill(0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1));
  EXPECT_TRUE(dst.all(0x5c, 0, 32));
  EXPECT_TRUE(dst.all(0, 32, 32));
}

// The send cannot go out at once (no receive yet): the data must still be that of post time.
TEST_F(RcOpsTest, InlineSendHeldForRnrKeepsTheDataOfPostTime) {
  Buffer dst = NewBuffer(64);
  std::array<uint8_t, 40> payload;
  payload.fill(0x3d);
  const ibv_sge sge{reinterpret_cast<uintptr_t>(payload.data()), 40, 0};
  ASSERT_EQ(post_send(p_.a, send_wr(1, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_INLINE), {sge}),
            0);
  payload.fill(0xaa);
  EXPECT_TRUE(no_completion(p_.cq_a, Millis{10})) << "RNR: the send waits for a receive";
  ASSERT_EQ(post_recv(p_.b, 100, {dst.sge()}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1));
  const ibv_wc r = poll_one(p_.cq_b);
  EXPECT_TRUE(completed(r, 100));
  EXPECT_EQ(r.byte_len, 40u);
  EXPECT_TRUE(dst.all(0x3d, 0, 40));
}

TEST_F(RcOpsTest, InlineLimitsAreEnforced) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(p_.a, &attr, 0, &init), 0);
  std::vector<uint8_t> big(init.cap.max_inline_data + 1, 1);
  const ibv_sge sge{reinterpret_cast<uintptr_t>(big.data()), static_cast<uint32_t>(big.size()), 0};
  EXPECT_EQ(post_send(p_.a, send_wr(1, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_INLINE), {sge}),
            EINVAL);
  EXPECT_TRUE(no_completion(p_.cq_a, Millis{10}));
}

TEST_F(RcOpsTest, ScatterGatherOnBothSides) {
  Buffer src1 = NewBuffer(64);
  Buffer src2 = NewBuffer(64);
  Buffer dst1 = NewBuffer(64, kRemoteAccess, 0xee);
  Buffer dst2 = NewBuffer(64, kRemoteAccess, 0xee);
  fill_pattern(src1, 1);
  fill_pattern(src2, 101);
  // 10 + 20 + 30 bytes gathered; scattered into 25 + 64 bytes.
  ASSERT_EQ(post_recv(p_.b, 100, {dst1.sge(0, 25), dst2.sge(0, 64)}), 0);
  ASSERT_EQ(post_send(p_.a, send_wr(1), {src1.sge(0, 10), src2.sge(0, 20), src1.sge(30, 30)}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1));
  const ibv_wc r = poll_one(p_.cq_b);
  EXPECT_TRUE(completed(r, 100));
  EXPECT_EQ(r.byte_len, 60u);

  std::vector<uint8_t> expected;
  expected.insert(expected.end(), src1.data(), src1.data() + 10);
  expected.insert(expected.end(), src2.data(), src2.data() + 20);
  expected.insert(expected.end(), src1.data() + 30, src1.data() + 60);
  EXPECT_EQ(std::memcmp(dst1.data(), expected.data(), 25), 0);
  EXPECT_EQ(std::memcmp(dst2.data(), expected.data() + 25, 35), 0);
  EXPECT_TRUE(dst2.all(0xee, 35, 29));

  // A gathered RDMA write, and a read scattered over two buffers.
  Buffer remote = NewBuffer(128, kRemoteAccess, 0);
  ASSERT_EQ(post_send(p_.a, rdma_wr(2, IBV_WR_RDMA_WRITE, remote.addr(), remote.rkey()),
                      {src2.sge(0, 16), src1.sge(0, 16)}),
            0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 2));
  EXPECT_EQ(std::memcmp(remote.data(), src2.data(), 16), 0);
  EXPECT_EQ(std::memcmp(remote.data() + 16, src1.data(), 16), 0);
  ASSERT_EQ(post_send(p_.a, rdma_wr(3, IBV_WR_RDMA_READ, remote.addr(), remote.rkey()),
                      {dst1.sge(0, 8), dst2.sge(0, 24)}),
            0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 3));
  EXPECT_EQ(std::memcmp(dst1.data(), src2.data(), 8), 0);
  EXPECT_EQ(std::memcmp(dst2.data(), src2.data() + 8, 8), 0);
  EXPECT_EQ(std::memcmp(dst2.data() + 8, src1.data(), 16), 0);
}

TEST_F(RcOpsTest, ZeroLengthSend) {
  Buffer dst = NewBuffer(64, kRemoteAccess, 0x77);
  ASSERT_EQ(post_recv(p_.b, 100, {dst.sge()}), 0);
  ASSERT_EQ(post_send(p_.a, send_wr(1)), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1));
  const ibv_wc r = poll_one(p_.cq_b);
  EXPECT_TRUE(completed(r, 100));
  EXPECT_EQ(r.opcode, IBV_WC_RECV);
  EXPECT_EQ(r.byte_len, 0u);
  EXPECT_TRUE(dst.all(0x77));
}

TEST_F(RcOpsTest, ReceiveQueueFullIsEnomem) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(p_.b, &attr, 0, &init), 0);
  Buffer dst = NewBuffer(64);
  for (uint32_t i = 0; i < init.cap.max_recv_wr; ++i) ASSERT_EQ(post_recv(p_.b, i, {dst.sge()}), 0);
  EXPECT_EQ(post_recv(p_.b, 1000, {dst.sge()}), ENOMEM);
  // One message frees one entry.
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  ASSERT_EQ(post_send(p_.a, send_wr(1), {src.sge(0, 8)}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_b), 0));
  EXPECT_EQ(post_recv(p_.b, 1001, {dst.sge()}), 0);
  EXPECT_EQ(post_recv(p_.b, 1002, {dst.sge()}), ENOMEM) << "one message, one entry";

  // A QP moved to RESET drops what was posted: the whole queue is free again.
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(p_.b, &reset, IBV_QP_STATE), 0);
  ASSERT_EQ(rc_to_init(p_.b, kRemoteAccess), 0);
  for (uint32_t i = 0; i < init.cap.max_recv_wr; ++i)
    ASSERT_EQ(post_recv(p_.b, 2000 + i, {dst.sge()}), 0) << "entry " << i;
  EXPECT_EQ(post_recv(p_.b, 3000, {dst.sge()}), ENOMEM);
}

TEST_F(RcOpsTest, PostingAListStopsAtTheFirstBadRequest) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(p_.a, &attr, 0, &init), 0);
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);
  std::vector<ibv_sge> sges(init.cap.max_send_sge + 1, src.sge(0, 1));
  ibv_send_wr wrs[3];
  for (uint64_t i = 0; i < 3; ++i) {
    wrs[i] = rdma_wr(i + 1, IBV_WR_RDMA_WRITE, dst.addr(i * 8), dst.rkey());
    wrs[i].sg_list = sges.data();
    wrs[i].num_sge = 1;
    wrs[i].next = i < 2 ? &wrs[i + 1] : nullptr;
  }
  wrs[1].num_sge = static_cast<int>(sges.size());  // more than max_send_sge
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(p_.a, &wrs[0], &bad), EINVAL);
  EXPECT_EQ(bad, &wrs[1]);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1)) << "the requests before the bad one were posted";
  EXPECT_TRUE(no_completion(p_.cq_a));
  EXPECT_EQ(dst.data()[0], 1);
  EXPECT_TRUE(dst.all(0, 8, 56)) << "nothing from the bad request on";
}

class RcSelectiveSignallingTest : public RcLoopbackTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(RcLoopbackTest::SetUp());
    PairOptions o;
    o.sq_sig_all = false;
    o.caps.send_wr = 16;
    ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    ASSERT_EQ(ibv_query_qp(p_.a, &attr, 0, &init), 0);
    EXPECT_EQ(init.sq_sig_all, 0);
    depth_ = init.cap.max_send_wr;
    ASSERT_GE(depth_, 16u);
    src_ = NewBuffer(64, kRemoteAccess, 1);
    dst_ = NewBuffer(64);
  }
  int Write(uint64_t wr_id, bool signalled) {
    return post_send(p_.a,
                     rdma_wr(wr_id, IBV_WR_RDMA_WRITE, dst_.addr(), dst_.rkey(),
                             signalled ? IBV_SEND_SIGNALED : 0),
                     {src_.sge(0, 8)});
  }

  uint32_t depth_ = 0;
  Buffer src_;
  Buffer dst_;
};

TEST_F(RcSelectiveSignallingTest, OnlySignalledWorkCompletes) {
  for (uint64_t id = 1; id <= 10; ++id) ASSERT_EQ(Write(id, false), 0);
  ASSERT_EQ(Write(11, true), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 11));
  EXPECT_TRUE(no_completion(p_.cq_a));
  EXPECT_TRUE(dst_.all(1, 0, 8));
}

TEST_F(RcSelectiveSignallingTest, SendQueueFullIsEnomemUntilASignalledCompletionIsPolled) {
  for (uint64_t id = 1; id < depth_; ++id) ASSERT_EQ(Write(id, false), 0) << id;
  ASSERT_EQ(Write(depth_, true), 0);
  // The queue holds max_send_wr WRs until the signalled one is polled.
  EXPECT_EQ(Write(100, false), ENOMEM);
  EXPECT_EQ(Write(101, true), ENOMEM);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), depth_));
  EXPECT_EQ(Write(102, true), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 102));
}

// Messages are received in the order they were posted, also when the first ones find no
// receive (RNR) and the rest queue up behind them.
using RcOrderingTest = RcLoopbackTest;

TEST_F(RcOrderingTest, ReceivesArriveInPostOrderAcrossRnrRetries) {
  constexpr uint32_t kMessages = 96;
  constexpr uint32_t kEarlyReceives = 32;
  PairOptions o;
  o.caps.send_wr = kMessages;
  o.caps.recv_wr = kMessages;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer src = NewBuffer(kMessages * 4);
  Buffer dst = NewBuffer(kMessages * 4, kRemoteAccess, 0xff);
  for (uint32_t i = 0; i < kMessages; ++i) std::memcpy(src.data() + i * 4, &i, 4);

  for (uint32_t i = 0; i < kEarlyReceives; ++i)
    ASSERT_EQ(post_recv(p_.b, 1000 + i, {dst.sge(i * 4, 4)}), 0);
  for (uint32_t i = 0; i < kMessages; ++i)
    ASSERT_EQ(post_send(p_.a, send_wr(i), {src.sge(i * 4, 4)}), 0);
  for (uint32_t i = kEarlyReceives; i < kMessages; ++i)
    ASSERT_EQ(post_recv(p_.b, 1000 + i, {dst.sge(i * 4, 4)}), 0);

  const std::vector<ibv_wc> sent = poll_n(p_.cq_a, kMessages);
  const std::vector<ibv_wc> received = poll_n(p_.cq_b, kMessages);
  ASSERT_EQ(sent.size(), kMessages);
  ASSERT_EQ(received.size(), kMessages);
  for (uint32_t i = 0; i < kMessages; ++i) {
    EXPECT_TRUE(completed(sent[i], i));
    EXPECT_TRUE(completed(received[i], 1000 + i));
    uint32_t seq = 0;
    std::memcpy(&seq, dst.data() + i * 4, 4);
    EXPECT_EQ(seq, i) << "receive " << i << " holds message " << seq;
  }
}

// A receive queue holds the next power of two of receives at least (a slot is found by a
// mask), reports that, takes exactly that many, and keeps its order lap after lap.
struct RoundingCase {
  const char* name;
  bool shared;      // an SRQ, else the QP's own queue
  uint32_t wanted;  // receives asked for
};

class ReceiveQueueRounding : public RcLoopbackTest,
                             public ::testing::WithParamInterface<RoundingCase> {};

TEST_P(ReceiveQueueRounding, HoldsTheNextPowerOfTwoAndKeepsOrderOverLaps) {
  const RoundingCase& c = GetParam();
  PairOptions o;
  ibv_srq* srq = nullptr;
  if (c.shared) {
    srq = NewSrq(c.wanted);
    ASSERT_NE(srq, nullptr);
    o.srq_b = srq;
  } else {
    o.caps.recv_wr = c.wanted;
  }
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  uint32_t capacity = 0;
  if (c.shared) {
    ibv_srq_attr attr{};
    ASSERT_EQ(ibv_query_srq(srq, &attr), 0);
    capacity = attr.max_wr;
  } else {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    ASSERT_EQ(ibv_query_qp(p_.b, &attr, IBV_QP_CAP, &init), 0);
    capacity = init.cap.max_recv_wr;
  }
  EXPECT_EQ(capacity, std::bit_ceil(c.wanted));
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);
  auto post = [&](uint64_t id) {
    return c.shared ? post_srq_recv(srq, id, {dst.sge(0, 8)})
                    : post_recv(p_.b, id, {dst.sge(0, 8)});
  };
  uint64_t next_post = 0;
  for (; next_post < capacity; ++next_post) ASSERT_EQ(post(next_post), 0) << next_post;
  EXPECT_EQ(post(next_post), ENOMEM) << "one more than the queue holds";
  // Three laps round the ring, one message and one new receive at a time.
  for (uint64_t expected = 0; expected < 3 * uint64_t{capacity}; ++expected) {
    ASSERT_EQ(post_send(p_.a, send_wr(expected), {src.sge(0, 8)}), 0);
    ASSERT_TRUE(completed(poll_one(p_.cq_a), expected));
    const ibv_wc r = poll_one(p_.cq_b);
    ASSERT_TRUE(completed(r, expected)) << "receives are taken in the order posted";
    ASSERT_EQ(post(next_post++), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, ReceiveQueueRounding,
                         ::testing::Values(RoundingCase{"own_queue_of_5", false, 5},
                                           RoundingCase{"own_queue_of_100", false, 100},
                                           RoundingCase{"own_queue_of_64", false, 64},
                                           RoundingCase{"srq_of_5", true, 5},
                                           RoundingCase{"srq_of_100", true, 100}),
                         CaseName{});

// A request whose source and target overlap (both QPs of this process, one region) moves the
// bytes as memmove does: a plain copy of overlapping ranges is undefined.
struct OverlapCase {
  const char* name;
  ibv_wr_opcode opcode;
  uint32_t length;
};

class OverlappingRanges : public RcLoopbackTest,
                          public ::testing::WithParamInterface<OverlapCase> {};

TEST_P(OverlappingRanges, MoveTheBytesAsMemmoveDoes) {
  const OverlapCase& c = GetParam();
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  // The local range is [0, length), the remote one (or the receive) [kShift, kShift + length).
  constexpr size_t kShift = 8;
  Buffer region = NewBuffer(c.length + kShift);
  const bool send = c.opcode == IBV_WR_SEND;
  // A QP's first request takes the general path (it finds the peer), the second the
  // same-host fast path: both copy.
  for (uint64_t id = 1; id <= 2; ++id) {
    for (size_t i = 0; i < region.size; ++i) region.data()[i] = static_cast<uint8_t>(i * 7 + id);
    std::vector<uint8_t> want(region.data(), region.data() + region.size);
    if (c.opcode == IBV_WR_RDMA_READ)
      std::memmove(want.data(), want.data() + kShift, c.length);
    else
      std::memmove(want.data() + kShift, want.data(), c.length);
    if (send) {
      ASSERT_EQ(post_recv(p_.b, id, {region.sge(kShift, c.length)}), 0);
    }
    const ibv_send_wr wr =
        send ? send_wr(id) : rdma_wr(id, c.opcode, region.addr(kShift), region.rkey());
    ASSERT_EQ(post_send(p_.a, wr, {region.sge(0, c.length)}), 0);
    ASSERT_TRUE(completed(poll_one(p_.cq_a), id));
    if (send) {
      ASSERT_TRUE(completed(poll_one(p_.cq_b), id));
    }
    EXPECT_TRUE(std::equal(want.begin(), want.end(), region.data())) << "request " << id;
  }
}

INSTANTIATE_TEST_SUITE_P(Requests, OverlappingRanges,
                         ::testing::Values(OverlapCase{"write_64B", IBV_WR_RDMA_WRITE, 64},
                                           OverlapCase{"write_4KiB", IBV_WR_RDMA_WRITE, 4096},
                                           OverlapCase{"read_64B", IBV_WR_RDMA_READ, 64},
                                           OverlapCase{"read_4KiB", IBV_WR_RDMA_READ, 4096},
                                           OverlapCase{"send_64B", IBV_WR_SEND, 64},
                                           OverlapCase{"send_4KiB", IBV_WR_SEND, 4096}),
                         CaseName{});

}  // namespace
}  // namespace softrdma_test

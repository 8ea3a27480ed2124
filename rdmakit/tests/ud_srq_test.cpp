// The other RAII objects at work: a UD QP with an address handle, a shared receive queue
// behind an RC QP, and a UD send through the coroutine path's raw post().
#include <gtest/gtest.h>

#include "loopback_pair.hpp"
#include "rdmakit/async_queue_pair.hpp"
#include "rdmakit/poller.hpp"

namespace rdmakit {
namespace {

constexpr uint32_t kGrh = 40;  // every UD receive starts with the global routing header

TEST(UdAndSrq, UdSendThroughAnAddressHandle) {
  Context ctx = Context::open();
  ProtectionDomain pd(ctx);
  CompletionQueue cq(ctx, 64);
  QueuePair sender = QpBuilder(ctx, pd, cq).type(QpType::ud).qkey(0x1234).build();
  QueuePair receiver = QpBuilder(ctx, pd, cq).type(QpType::ud).qkey(0x1234).build();
  EXPECT_EQ(sender.caps().rd_atomic, 0);
  sender.activate();
  receiver.activate();
  EXPECT_EQ(receiver.state(), IBV_QPS_RTS);
  std::vector<std::byte> memory(8192);
  MemoryRegion mr = pd.register_memory(memory.data(), memory.size(), Access::local_write);
  AddressHandle ah(ctx, pd, receiver.address());
  EXPECT_EQ(ah.remote_qpn(), receiver.qpn());

  Poller poller(cq);
  AsyncQueuePair rx(poller, receiver), tx(poller, sender);
  std::memcpy(memory.data(), "datagram", 8);
  Received got;
  std::error_code sent;
  auto receive = [&]() -> Task<void> { got = co_await rx.recv(mr.local().subspan(4096, 1024)); };
  auto send = [&]() -> Task<void> {
    ibv_sge sge = mr.local().first(8).sge();
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.wr.ud.ah = ah.get();
    wr.wr.ud.remote_qpn = ah.remote_qpn();
    wr.wr.ud.remote_qkey = ah.remote_qkey();
    sent = co_await tx.post(wr);  // sge lives in this frame until the awaiter completes
  };
  spawn(receive());
  spawn(send());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while ((rx.in_flight() || tx.in_flight()) && std::chrono::steady_clock::now() < deadline)
    poller.poll();
  EXPECT_EQ(rx.in_flight(), 0u);
  EXPECT_FALSE(sent) << sent.message();
  ASSERT_FALSE(got.error) << got.error.message();
  EXPECT_EQ(got.byte_len, kGrh + 8);
  EXPECT_EQ(std::memcmp(memory.data() + 4096 + kGrh, "datagram", 8), 0);
}

TEST(UdAndSrq, AnRcQpReceivesThroughASharedReceiveQueue) {
  Context ctx = Context::open();
  ProtectionDomain pd(ctx);
  CompletionQueue cq(ctx, 64);
  SharedReceiveQueue srq(ctx, pd, 16);
  EXPECT_GE(srq.depth(), 16u);
  QueuePair a = QpBuilder(ctx, pd, cq).build();
  QueuePair b = QpBuilder(ctx, pd, cq).srq(srq).build();
  EXPECT_EQ(b.caps().recv_depth, 0u);  // receives come from the SRQ
  a.connect(b.address(), {IBV_MTU_4096, 1, 1});
  b.connect(a.address(), {IBV_MTU_4096, 1, 1});
  std::vector<std::byte> memory(4096);
  MemoryRegion mr = pd.register_memory(memory.data(), memory.size(), Access::local_write);
  ibv_sge rsge = mr.local().subspan(1024, 64).sge();
  ibv_recv_wr rwr{};
  rwr.wr_id = 7;
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  ASSERT_FALSE(srq.post_recv(rwr));
  srq.set_limit(1);
  std::memcpy(memory.data(), "srq", 3);
  ibv_sge ssge = mr.local().first(3).sge();
  ibv_send_wr swr{};
  swr.wr_id = 1;
  swr.sg_list = &ssge;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_SIGNALED;
  ASSERT_FALSE(a.post_send(swr));
  bool sent = false, received = false;
  for (int i = 0; i < 2; ++i) {
    ibv_wc wc = testing::LoopbackPair::wait_one(cq);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    (wc.wr_id == 7 ? received : sent) = true;
    if (wc.wr_id == 7) {
      EXPECT_EQ(wc.byte_len, 3u);
    }
  }
  EXPECT_TRUE(sent);
  EXPECT_TRUE(received);
  EXPECT_EQ(std::memcmp(memory.data() + 1024, "srq", 3), 0);
}

}  // namespace
}  // namespace rdmakit

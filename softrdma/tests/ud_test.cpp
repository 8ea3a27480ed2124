// Unreliable datagram: address handles, the GRH in front of every receive, qkeys, replies.
#include "verbs_fixture.hpp"

namespace softrdma_test {
namespace {

constexpr uint32_t kGrh = 40;

TEST_F(UdTest, SendDeliversTheGrhThenThePayload) {
  UdPair p;
  ASSERT_NO_FATAL_FAILURE(MakeUdPair(&p));
  AhPtr ah = NewAh(gid0());
  ASSERT_NE(ah, nullptr);
  Buffer src = NewBuffer(256);
  Buffer dst = NewBuffer(kGrh + 256, kRemoteAccess, 0xee);
  for (size_t i = 0; i < 256; ++i) src.data()[i] = static_cast<uint8_t>(i);
  ASSERT_EQ(post_recv(p.b, 100, {dst.sge()}), 0);
  ASSERT_EQ(post_send(p.a, ud_wr(1, ah.get(), p.b->qp_num, kQkey), {src.sge(0, 200)}), 0);

  const ibv_wc s = poll_one(p.cq_a);
  EXPECT_TRUE(completed(s, 1));
  EXPECT_EQ(s.opcode, IBV_WC_SEND);
  const ibv_wc r = poll_one(p.cq_b);
  EXPECT_TRUE(completed(r, 100));
  EXPECT_EQ(r.opcode, IBV_WC_RECV);
  EXPECT_EQ(r.byte_len, kGrh + 200);
  EXPECT_NE(r.wc_flags & IBV_WC_GRH, 0u);
  EXPECT_EQ(r.qp_num, p.b->qp_num);
  EXPECT_EQ(r.src_qp, p.a->qp_num);
  EXPECT_EQ(r.sl, 2) << "RoCE v2 reports the network header type here: IPv4";
  EXPECT_EQ(std::memcmp(dst.data() + kGrh, src.data(), 200), 0);
  EXPECT_TRUE(dst.all(0xee, kGrh + 200, 56));

  // RoCE v2 over IPv4 (GID 0 is ::ffff:a.b.c.d): an IPv4 header in the GRH's last 20 bytes,
  // from and to GID 0's address.
  const uint8_t* grh = dst.data();
  EXPECT_EQ(grh[20], 0x45);
  EXPECT_EQ(std::memcmp(grh + 32, gid0().raw + 12, 4), 0) << "source address";
  EXPECT_EQ(std::memcmp(grh + 36, gid0().raw + 12, 4), 0) << "destination address";
}

TEST_F(UdTest, InlineSendDeliversThePayload) {
  UdPair p;
  ASSERT_NO_FATAL_FAILURE(MakeUdPair(&p));
  AhPtr ah = NewAh(gid0());
  ASSERT_NE(ah, nullptr);
  Buffer dst = NewBuffer(kGrh + 64);
  uint8_t payload[24];
  std::memset(payload, 0x39, sizeof payload);
  ASSERT_EQ(post_recv(p.b, 100, {dst.sge()}), 0);
  const ibv_sge sge{reinterpret_cast<uintptr_t>(payload), sizeof payload, 0};
  ibv_send_wr wr = ud_wr(1, ah.get(), p.b->qp_num, kQkey);
  wr.send_flags |= IBV_SEND_INLINE;
  ASSERT_EQ(post_send(p.a, wr, {sge}), 0);
  std::memset(payload, 0, sizeof payload);
  EXPECT_TRUE(completed(poll_one(p.cq_a), 1));
  const ibv_wc r = poll_one(p.cq_b);
  EXPECT_TRUE(completed(r, 100));
  EXPECT_EQ(r.byte_len, kGrh + sizeof payload);
  EXPECT_TRUE(dst.all(0x39, kGrh, sizeof payload));
}

TEST_F(UdTest, WrongQkeyIsDroppedSilently) {
  UdPair p;
  ASSERT_NO_FATAL_FAILURE(MakeUdPair(&p));
  AhPtr ah = NewAh(gid0());
  ASSERT_NE(ah, nullptr);
  Buffer src = NewBuffer(64, kRemoteAccess, 0x21);
  Buffer dst = NewBuffer(kGrh + 64);
  ASSERT_EQ(post_recv(p.b, 100, {dst.sge()}), 0);

  ASSERT_EQ(post_send(p.a, ud_wr(1, ah.get(), p.b->qp_num, kQkey + 1), {src.sge(0, 16)}), 0);
  EXPECT_TRUE(completed(poll_one(p.cq_a), 1)) << "the sender cannot tell";
  EXPECT_TRUE(no_completion(p.cq_b));

  // The receive is still there for a message with the right qkey.
  ASSERT_EQ(post_send(p.a, ud_wr(2, ah.get(), p.b->qp_num, kQkey), {src.sge(0, 16)}), 0);
  EXPECT_TRUE(completed(poll_one(p.cq_a), 2));
  const ibv_wc r = poll_one(p.cq_b);
  EXPECT_TRUE(completed(r, 100));
  EXPECT_EQ(r.byte_len, kGrh + 16);
}

TEST_F(UdTest, QkeyWithTheHighBitSetMeansTheSendersOwn) {
  UdPair p;
  ASSERT_NO_FATAL_FAILURE(MakeUdPair(&p));
  AhPtr ah = NewAh(gid0());
  ASSERT_NE(ah, nullptr);
  Buffer src = NewBuffer(64, kRemoteAccess, 0x21);
  Buffer dst = NewBuffer(kGrh + 64);
  ASSERT_EQ(post_recv(p.b, 100, {dst.sge()}), 0);
  ASSERT_EQ(post_send(p.a, ud_wr(1, ah.get(), p.b->qp_num, 0x80000000u), {src.sge(0, 16)}), 0);
  EXPECT_TRUE(completed(poll_one(p.cq_a), 1));
  EXPECT_TRUE(completed(poll_one(p.cq_b), 100));
}

TEST_F(UdTest, OnlySendsArePostable) {
  UdPair p;
  ASSERT_NO_FATAL_FAILURE(MakeUdPair(&p));
  AhPtr ah = NewAh(gid0());
  ASSERT_NE(ah, nullptr);
  Buffer src = NewBuffer(64);
  for (ibv_wr_opcode op : {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD}) {
    ibv_send_wr wr = ud_wr(1, ah.get(), p.b->qp_num, kQkey);
    wr.opcode = op;
    EXPECT_EQ(post_send(p.a, wr, {src.sge(0, 8)}), EINVAL) << op;
  }
  EXPECT_TRUE(no_completion(p.cq_a, Millis{10}));
}

TEST_F(UdTest, MessageLargerThanTheMtuIsLocalLengthError) {
  UdPair p;
  ASSERT_NO_FATAL_FAILURE(MakeUdPair(&p));
  AhPtr ah = NewAh(gid0());
  ASSERT_NE(ah, nullptr);
  Buffer src = NewBuffer(8192);
  Buffer dst = NewBuffer(8192 + kGrh);
  ASSERT_EQ(post_recv(p.b, 100, {dst.sge()}), 0);
  ASSERT_EQ(post_send(p.a, ud_wr(1, ah.get(), p.b->qp_num, kQkey), {src.sge(0, 4097)}), 0);
  EXPECT_TRUE(completed(poll_one(p.cq_a), 1, IBV_WC_LOC_LEN_ERR));
  EXPECT_TRUE(no_completion(p.cq_b));
}

TEST_F(UdTest, AddressHandleWithoutGrhIsEinval) {
  ibv_ah_attr attr = global_ah_attr(gid0());
  attr.is_global = 0;
  attr.dlid = 1;
  errno = 0;
  EXPECT_EQ(ibv_create_ah(pd(), &attr), nullptr) << "RoCE needs a GRH";
  EXPECT_EQ(errno, EINVAL);
  attr = global_ah_attr(gid0());
  attr.port_num = 2;
  errno = 0;
  EXPECT_EQ(ibv_create_ah(pd(), &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(UdTest, AddressHandleFromACompletionReachesTheSender) {
  UdPair p;
  ASSERT_NO_FATAL_FAILURE(MakeUdPair(&p));
  AhPtr ah = NewAh(gid0());
  ASSERT_NE(ah, nullptr);
  Buffer src = NewBuffer(64, kRemoteAccess, 0x10);
  Buffer request = NewBuffer(kGrh + 64);
  Buffer reply = NewBuffer(kGrh + 64);
  ASSERT_EQ(post_recv(p.b, 100, {request.sge()}), 0);
  ASSERT_EQ(post_recv(p.a, 200, {reply.sge()}), 0);
  ASSERT_EQ(post_send(p.a, ud_wr(1, ah.get(), p.b->qp_num, kQkey), {src.sge(0, 8)}), 0);
  EXPECT_TRUE(completed(poll_one(p.cq_a), 1));
  ibv_wc wc = poll_one(p.cq_b);
  ASSERT_TRUE(completed(wc, 100));

  AhPtr back(ibv_create_ah_from_wc(pd(), &wc, reinterpret_cast<ibv_grh*>(request.data()), kPort));
  ASSERT_NE(back, nullptr) << std::strerror(errno);
  std::memset(src.data(), 0x20, 8);
  ASSERT_EQ(post_send(p.b, ud_wr(2, back.get(), wc.src_qp, kQkey), {src.sge(0, 8)}), 0);
  EXPECT_TRUE(completed(poll_one(p.cq_b), 2));
  const ibv_wc r = poll_one(p.cq_a);
  EXPECT_TRUE(completed(r, 200));
  EXPECT_EQ(r.src_qp, p.b->qp_num);
  EXPECT_EQ(r.byte_len, kGrh + 8);
  EXPECT_TRUE(reply.all(0x20, kGrh, 8));

  // A completion without a GRH gives no address.
  wc.wc_flags &= ~static_cast<unsigned>(IBV_WC_GRH);
  errno = 0;
  EXPECT_EQ(ibv_create_ah_from_wc(pd(), &wc, reinterpret_cast<ibv_grh*>(request.data()), kPort),
            nullptr);
}

}  // namespace
}  // namespace softrdma_test

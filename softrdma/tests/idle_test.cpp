// No thread of softrdma spins in the background: a process holding many connected, idle
// QPs (with an armed completion channel, as an event-driven server would) uses no CPU.
#include "verbs_fixture.hpp"

namespace softrdma_test {
namespace {

class IdleTest : public RcLoopbackTest {};

TEST_F(IdleTest, HundredConnectedQpsUseNoCpuWhileIdle) {
  ibv_comp_channel* channel = NewChannel();
  ibv_cq* cq = NewCq(1024, channel);
  ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
  PairOptions o;
  o.a_send_cq = o.a_recv_cq = o.b_send_cq = o.b_recv_cq = cq;
  RcPair pairs[50];
  for (RcPair& p : pairs) ASSERT_NO_FATAL_FAILURE(MakePair(o, &p));
  // One RNR-delayed send and its completion: the helper thread has run and gone to sleep.
  Buffer buf = NewBuffer(64);
  ASSERT_EQ(post_send(pairs[0].a, send_wr(1), {buf.sge()}), 0);
  std::this_thread::sleep_for(Millis(5));
  ASSERT_EQ(post_recv(pairs[0].b, 2, {buf.sge()}), 0);
  EXPECT_EQ(poll_n(cq, 2).size(), 2u);
  ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);

  const double before = cpu_seconds();
  std::this_thread::sleep_for(Millis(1000));
  const double used = cpu_seconds() - before;
  // A spinning thread would use ~1 s; timer ticks and accounting noise stay far below.
  EXPECT_LT(used, 0.02) << "CPU seconds used while idle";
}

}  // namespace
}  // namespace softrdma_test

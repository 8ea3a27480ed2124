// A region a peer (or, for the local side, this QP) has already used and that is then
// deregistered, re-registered, or deregistered while another thread writes into it: the
// next access sees it as it is now.
#include <atomic>
#include <thread>

#include "verbs_fixture.hpp"

namespace softrdma_test {
namespace {

class MrInUseTest : public RcLoopbackTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(RcLoopbackTest::SetUp());
    ASSERT_NO_FATAL_FAILURE(ConnectPair());
  }

  /// An 8-byte RDMA WRITE of `src` to `addr`/`rkey` on p_.b; its completion status.
  ibv_wc_status WriteAndWait(uint64_t wr_id, const Buffer& src, uint64_t addr, uint32_t rkey) {
    EXPECT_EQ(post_send(p_.a, rdma_wr(wr_id, IBV_WR_RDMA_WRITE, addr, rkey), {src.sge(0, 8)}), 0);
    const ibv_wc wc = poll_one(p_.cq_a);
    EXPECT_EQ(wc.wr_id, wr_id);
    return wc.status;
  }
};

TEST_F(MrInUseTest, AUsedRegionThatIsDeregisteredRefusesTheNextAccess) {
  Buffer src = NewBuffer(8, kRemoteAccess, 0x11);
  Buffer dst = NewBuffer(4096, kRemoteAccess, 0);
  const uint32_t rkey = dst.rkey();
  ASSERT_EQ(WriteAndWait(1, src, dst.addr(), rkey), IBV_WC_SUCCESS);
  ASSERT_TRUE(dst.all(0x11, 0, 8));
  ASSERT_EQ(ibv_dereg_mr(dst.mr.release()), 0);
  dst.fill(0);

  EXPECT_EQ(WriteAndWait(2, src, dst.addr(), rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(dst.all(0)) << "written after ibv_dereg_mr";
}

TEST_F(MrInUseTest, ARegionReregisteredUnderItsKeyIsReachedAsItIsNow) {
  Buffer moved = allocate_buffer(4096, 0);  // outlives the region that ends up on it
  Buffer src = NewBuffer(8, kRemoteAccess, 0x22);
  Buffer dst = NewBuffer(4096, kRemoteAccess, 0);
  ASSERT_EQ(WriteAndWait(1, src, dst.addr(), dst.rkey()), IBV_WC_SUCCESS);
  dst.fill(0);

  // The same region now describes other pages (at the same address, as peers see it).
  ASSERT_EQ(
      ibv_rereg_mr(dst.mr.get(), IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, moved.data(), 4096, 0),
      0);
  EXPECT_EQ(WriteAndWait(2, src, moved.addr(), dst.rkey()), IBV_WC_SUCCESS);
  EXPECT_TRUE(moved.all(0x22, 0, 8));
  EXPECT_TRUE(dst.all(0)) << "the old pages were written";

  // And now without remote write access: refused.
  ASSERT_EQ(ibv_rereg_mr(dst.mr.get(), IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ),
            0);
  moved.fill(0);
  EXPECT_EQ(WriteAndWait(3, src, moved.addr(), dst.rkey()), IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(moved.all(0));
}

// The local side of a request is checked as it is now, too: the region a QP read into last
// is remembered by that QP (engine/local_key_cache.hpp), and must not outlive a change.
TEST_F(MrInUseTest, ALocalRegionReadIntoThatIsDeregisteredFailsTheNextRead) {
  Buffer local = NewBuffer(8, kRemoteAccess, 0);
  Buffer src = NewBuffer(8, kRemoteAccess, 0x44);
  const ibv_sge into_local = local.sge(0, 8);
  // Twice: a QP's first request finds its peer, later ones go the direct way.
  for (uint64_t id : {1, 2}) {
    ASSERT_EQ(post_send(p_.a, rdma_wr(id, IBV_WR_RDMA_READ, src.addr(), src.rkey()), {into_local}),
              0);
    ASSERT_TRUE(completed(poll_one(p_.cq_a), id));
  }
  ASSERT_TRUE(local.all(0x44));
  ASSERT_EQ(ibv_dereg_mr(local.mr.release()), 0);
  local.fill(0);

  ASSERT_EQ(post_send(p_.a, rdma_wr(3, IBV_WR_RDMA_READ, src.addr(), src.rkey()), {into_local}), 0);
  EXPECT_EQ(poll_one(p_.cq_a).status, IBV_WC_LOC_PROT_ERR);
  EXPECT_TRUE(local.all(0)) << "read into after ibv_dereg_mr";
}

TEST_F(MrInUseTest, ALocalRegionReregisteredIsReadIntoAsItIsNow) {
  Buffer moved = allocate_buffer(4096, 0);  // outlives the region that ends up on it
  Buffer local = NewBuffer(4096, kRemoteAccess, 0);
  Buffer src = NewBuffer(8, kRemoteAccess, 0x55);
  ASSERT_EQ(
      post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_READ, src.addr(), src.rkey()), {local.sge(0, 8)}), 0);
  ASSERT_TRUE(completed(poll_one(p_.cq_a), 1));
  local.fill(0);

  // Other pages under the same key: the next read lands there, not in the old pages.
  ASSERT_EQ(
      ibv_rereg_mr(local.mr.get(), IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, moved.data(), 4096, 0),
      0);
  const ibv_sge into_moved{moved.addr(), 8, local.mr->lkey};
  ASSERT_EQ(post_send(p_.a, rdma_wr(2, IBV_WR_RDMA_READ, src.addr(), src.rkey()), {into_moved}), 0);
  ASSERT_TRUE(completed(poll_one(p_.cq_a), 2));
  EXPECT_TRUE(moved.all(0x55, 0, 8));
  EXPECT_TRUE(local.all(0)) << "the old pages were read into";

  // And now without local write access: a read into it is refused.
  ASSERT_EQ(ibv_rereg_mr(local.mr.get(), IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, 0), 0);
  moved.fill(0);
  ASSERT_EQ(post_send(p_.a, rdma_wr(3, IBV_WR_RDMA_READ, src.addr(), src.rkey()), {into_moved}), 0);
  EXPECT_EQ(poll_one(p_.cq_a).status, IBV_WC_LOC_PROT_ERR);
  EXPECT_TRUE(moved.all(0));
}

TEST_F(MrInUseTest, ReadsAndAtomicsStayInsideTheRegion) {
  Buffer local = NewBuffer(16, kRemoteAccess, 0);
  Buffer dst = NewBuffer(64, kRemoteAccess, 0x33);
  ASSERT_EQ(
      post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_READ, dst.addr(), dst.rkey()), {local.sge(0, 8)}), 0);
  ASSERT_TRUE(completed(poll_one(p_.cq_a), 1));
  EXPECT_TRUE(local.all(0x33, 0, 8));
  // One byte past the end: refused, the QP fails.
  ASSERT_EQ(post_send(p_.a, atomic_wr(2, IBV_WR_ATOMIC_FETCH_AND_ADD, dst.addr(64), dst.rkey(), 1),
                      {local.sge(8, 8)}),
            0);
  EXPECT_EQ(poll_one(p_.cq_a).status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(dst.all(0x33));
}

// Under TSan this also shows that no access races with ibv_dereg_mr: a writer thread keeps a
// region busy while the main thread deregisters it.
TEST_F(MrInUseTest, DeregisteringWhileAnotherThreadWritesEndsAllAccess) {
  constexpr size_t kSize = 4096;
  Buffer src = NewBuffer(kSize, kRemoteAccess, 0xab);
  Buffer dst = NewBuffer(kSize, kRemoteAccess, 0);
  const uint64_t addr = dst.addr();
  const uint32_t rkey = dst.rkey();
  std::atomic<uint64_t> writes{0};
  std::atomic<int> last_status{IBV_WC_SUCCESS};
  std::thread writer([&] {
    const auto deadline = Clock::now() + Millis{5000};
    while (Clock::now() < deadline) {
      if (post_send(p_.a, rdma_wr(writes + 1, IBV_WR_RDMA_WRITE, addr, rkey), {src.sge()}) != 0)
        return;
      ibv_wc wc{};
      if (!poll_wc(p_.cq_a, Millis{3000}, &wc)) return;
      last_status = wc.status;
      if (wc.status != IBV_WC_SUCCESS) return;
      ++writes;
    }
  });
  const auto started = Clock::now();
  while (writes < 1000 && Clock::now() - started < Millis{3000}) std::this_thread::yield();
  ASSERT_EQ(ibv_dereg_mr(dst.mr.release()), 0);
  dst.fill(0x5a);  // from here on nothing may write it
  writer.join();

  EXPECT_GE(writes.load(), 1000u);
  EXPECT_EQ(last_status.load(), IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(dst.all(0x5a)) << "memory written after ibv_dereg_mr returned";
}

}  // namespace
}  // namespace softrdma_test

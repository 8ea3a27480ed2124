// Memory registration: access checks, optional flags, unmapped memory, re-registration and
// the PD's reference from its MRs.
#include <sys/mman.h>
#include <unistd.h>

#include "verbs_fixture.hpp"

namespace softrdma_test {
namespace {

using MrTest = RcLoopbackTest;

TEST_F(MrTest, RegisterAndDeregister) {
  Buffer b = allocate_buffer(8192);
  ibv_mr* mr = ibv_reg_mr(pd(), b.data(), 8192, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << std::strerror(errno);
  EXPECT_EQ(mr->addr, b.data());
  EXPECT_EQ(mr->length, 8192u);
  EXPECT_EQ(mr->pd, pd());
  EXPECT_EQ(mr->context, ctx());
  // A second registration of the same memory is a different region with other keys.
  ibv_mr* again = ibv_reg_mr(pd(), b.data(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(again, nullptr) << std::strerror(errno);
  EXPECT_NE(again->lkey, mr->lkey);
  EXPECT_NE(again->rkey, mr->rkey);
  EXPECT_EQ(ibv_dereg_mr(again), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(MrTest, RemoteWriteOrAtomicWithoutLocalWriteIsEinval) {
  Buffer b = allocate_buffer(4096);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd(), b.data(), 4096, IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd(), b.data(), 4096, IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ),
            nullptr);
  EXPECT_EQ(errno, EINVAL);
  // Remote read alone needs no local write.
  MrPtr read_only(ibv_reg_mr(pd(), b.data(), 4096, IBV_ACCESS_REMOTE_READ));
  EXPECT_NE(read_only, nullptr) << std::strerror(errno);
}

TEST_F(MrTest, UnknownOptionalAccessBitIsAccepted) {
  Buffer b = allocate_buffer(4096);
  // Bits from IBV_ACCESS_OPTIONAL_FIRST up are hints a provider may ignore.
  MrPtr mr(ibv_reg_mr_iova2(pd(), b.data(), 4096, b.addr(),
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING));
  ASSERT_NE(mr, nullptr) << std::strerror(errno);
  EXPECT_EQ(mr->addr, b.data());
  EXPECT_EQ(mr->length, 4096u);
}

TEST_F(MrTest, UnmappedMemoryIsEfault) {
  const long page = sysconf(_SC_PAGESIZE);
  const size_t len = static_cast<size_t>(page) * 4;
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(munmap(p, len), 0);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd(), p, len, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
}

TEST_F(MrTest, MemoryWithoutTheNeededRightsIsEfault) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* none = mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* read_only = mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(none, MAP_FAILED);
  ASSERT_NE(read_only, MAP_FAILED);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd(), none, page, 0), nullptr);
  EXPECT_EQ(errno, EFAULT);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd(), read_only, page, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
  // Read-only memory may still be sent from or read remotely.
  ibv_mr* mr = ibv_reg_mr(pd(), read_only, page, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr) << strerror(errno);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(none, page);
  munmap(read_only, page);
}

TEST_F(MrTest, ARangeOverSeveralMappingsNeedsTheRightsInEachAndNoHole) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto* p = static_cast<char*>(
      mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(mprotect(p + page, page, PROT_READ), 0);  // three mappings: rw, r, rw
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd(), p, 3 * page, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT) << "the middle page is not writable";
  ibv_mr* mr = ibv_reg_mr(pd(), p, 3 * page, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  mr = ibv_reg_mr(pd(), p + 2 * page, page, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);

  ASSERT_EQ(munmap(p + page, page), 0);  // now a hole between two writable pages
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd(), p, 3 * page, IBV_ACCESS_REMOTE_READ), nullptr);
  EXPECT_EQ(errno, EFAULT) << "a hole in the range";
  munmap(p, page);
  munmap(p + 2 * page, page);
}

TEST_F(MrTest, DeallocPdWithRegionIsEbusy) {
  PdPtr pd2(ibv_alloc_pd(ctx()));
  ASSERT_NE(pd2, nullptr);
  Buffer b = allocate_buffer(4096);
  ibv_mr* mr = ibv_reg_mr(pd2.get(), b.data(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(ibv_dealloc_pd(pd2.get()), EBUSY);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd2.release()), 0);
}

TEST_F(MrTest, ReregKeepsKeysAndChangesTheTranslation) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer src = NewBuffer(64, kRemoteAccess, 0x5a);
  Buffer second = allocate_buffer(8192, 0x00);  // outlives the region that moves onto it
  Buffer first = NewBuffer(4096, kRemoteAccess, 0x00);
  ASSERT_TRUE(src.mr && first.mr);
  const uint32_t old_lkey = first.lkey();
  const uint32_t old_rkey = first.rkey();

  EXPECT_EQ(ibv_rereg_mr(first.mr.get(), 0, nullptr, nullptr, 0, 0), IBV_REREG_MR_ERR_INPUT);
  ASSERT_EQ(ibv_rereg_mr(first.mr.get(), IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, second.data(),
                         8192, 0),
            0)
      << std::strerror(errno);
  ibv_mr* mr = first.mr.get();
  EXPECT_EQ(mr->addr, second.data());
  EXPECT_EQ(mr->length, 8192u);
  EXPECT_EQ(mr->lkey, old_lkey) << "keys stay, as on mlx5 and rxe";
  EXPECT_EQ(mr->rkey, old_rkey);

  // The region now maps `second`: a write through the new key lands there, not in `first`.
  ASSERT_EQ(
      post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_WRITE, second.addr(4096), mr->rkey), {src.sge(0, 64)}),
      0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1));
  EXPECT_TRUE(second.all(0x5a, 4096, 64));
  EXPECT_TRUE(second.all(0x00, 0, 4096));
  EXPECT_TRUE(first.all(0x00));

  // The old memory is no longer behind the key.
  ASSERT_EQ(
      post_send(p_.a, rdma_wr(2, IBV_WR_RDMA_WRITE, first.addr(), old_rkey), {src.sge(0, 64)}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 2, IBV_WC_REM_ACCESS_ERR));
  EXPECT_TRUE(first.all(0x00));
}

TEST_F(MrTest, ReregToAnotherPdMovesTheRegion) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  PdPtr pd2(ibv_alloc_pd(ctx()));
  ASSERT_NE(pd2, nullptr);
  Buffer src = NewBuffer(64, kRemoteAccess, 1);
  Buffer dst = NewBuffer(64);
  ASSERT_TRUE(src.mr && dst.mr);
  ASSERT_EQ(ibv_rereg_mr(src.mr.get(), IBV_REREG_MR_CHANGE_PD, pd2.get(), nullptr, 0, 0), 0)
      << std::strerror(errno);
  EXPECT_EQ(src.mr->pd, pd2.get());
  EXPECT_EQ(ibv_dealloc_pd(pd2.get()), EBUSY) << "the region moved to pd2";
  // A QP of the first PD may no longer use it.
  ASSERT_EQ(post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge(0, 8)}),
            0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1, IBV_WC_LOC_PROT_ERR));
  EXPECT_TRUE(dst.all(0));
  EXPECT_EQ(ibv_dereg_mr(src.mr.release()), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd2.release()), 0);
}

TEST_F(MrTest, ReregOfAccessOnlyKeepsTheIova) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  constexpr uint64_t kIova = 0x100000;
  Buffer local = NewBuffer(64, kRemoteAccess, 0x00);
  Buffer target = allocate_buffer(4096, 0x00);
  for (size_t i = 0; i < 4096; ++i) target.data()[i] = static_cast<uint8_t>(i);
  target.mr.reset(ibv_reg_mr_iova(pd(), target.data(), 4096, kIova,
                                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  ASSERT_TRUE(local.mr && target.mr) << std::strerror(errno);

  // Remote addresses are iova-based.
  ASSERT_EQ(
      post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_READ, kIova + 256, target.rkey()), {local.sge(0, 16)}),
      0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1, IBV_WC_REM_ACCESS_ERR))
      << "the region was registered without remote read";
  // The failed read moved both QPs to ERROR: connect a fresh pair.
  RcPair q;
  ASSERT_NO_FATAL_FAILURE(MakePair({}, &q));

  // Adding remote read keeps the translation, including the iova.
  ASSERT_EQ(ibv_rereg_mr(target.mr.get(), IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ),
            0)
      << std::strerror(errno);
  ASSERT_EQ(
      post_send(q.a, rdma_wr(2, IBV_WR_RDMA_READ, kIova + 256, target.rkey()), {local.sge(0, 16)}),
      0);
  EXPECT_TRUE(completed(poll_one(q.cq_a), 2));
  uint8_t expected[16];
  for (size_t i = 0; i < 16; ++i) expected[i] = static_cast<uint8_t>(256 + i);
  EXPECT_EQ(std::memcmp(local.data(), expected, 16), 0);
}

// rdma-core's test_mr_rereg_access: the peer goes on with the rkey it was given.
TEST_F(MrTest, ReregOfAccessKeepsTheKeysAPeerHolds) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer src = NewBuffer(64, kRemoteAccess, 0x33);
  Buffer target = NewBuffer(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0x00);
  ASSERT_TRUE(src.mr && target.mr);
  const uint32_t rkey = target.rkey();
  ASSERT_EQ(
      ibv_rereg_mr(target.mr.get(), IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, kRemoteAccess),
      0)
      << std::strerror(errno);
  EXPECT_EQ(target.mr->rkey, rkey);
  ASSERT_EQ(
      post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_WRITE, target.addr(128), rkey), {src.sge(0, 64)}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 1));
  EXPECT_TRUE(target.all(0x33, 128, 64));
  // The new rights hold at once: a READ, which the old access refused.
  ASSERT_EQ(post_send(p_.a, rdma_wr(2, IBV_WR_RDMA_READ, target.addr(128), rkey), {src.sge(0, 8)}),
            0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 2));
}

}  // namespace
}  // namespace softrdma_test

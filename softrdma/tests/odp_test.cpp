// On-demand paging: a region registered with IBV_ACCESS_ON_DEMAND pins and moves nothing
// and is reached through the address space as it is at each access, so mappings made after
// registration show through and a hole fails the access, not the process. The implicit
// region (NULL, SIZE_MAX) covers every address; ibv_advise_mr prefetches.
#include <sys/mman.h>

#include "verbs_fixture.hpp"

namespace softrdma_test {
namespace {

constexpr int kOnDemand = kRemoteAccess | IBV_ACCESS_ON_DEMAND;
const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// Anonymous pages of our own, unmapped when the test ends.
struct Pages {
  explicit Pages(size_t n) : length(n * kPage) {
    base = static_cast<uint8_t*>(
        mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  }
  ~Pages() { munmap(base, length); }
  Pages(const Pages&) = delete;
  Pages& operator=(const Pages&) = delete;
  uint64_t addr(size_t offset = 0) const { return reinterpret_cast<uintptr_t>(base) + offset; }
  uint8_t* base;
  size_t length;
};

class OdpTest : public RcLoopbackTest {
 protected:
  void SetUp() override {
    RcLoopbackTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(ConnectPair());
    source_ = NewBuffer(64, kRemoteAccess, 0x6b);
  }
  ibv_mr* Register(void* addr, size_t length, int access = kOnDemand) {
    regions_.emplace_back(ibv_reg_mr(pd(), addr, length, access));
    if (!regions_.back()) ADD_FAILURE() << "ibv_reg_mr: " << std::strerror(errno);
    return regions_.back().get();
  }
  // a's 64-byte RDMA `opcode` at `addr` through `rkey`; its completion.
  ibv_wc Access(uint32_t rkey, uint64_t addr, ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE) {
    EXPECT_EQ(post_send(p_.a, rdma_wr(3, opcode, addr, rkey), {source_.sge()}), 0);
    return poll_one(p_.cq_a);
  }
  Buffer source_;
  std::vector<MrPtr> regions_;
};

TEST_F(OdpTest, CapabilitiesAreAdvertisedForEveryOperation) {
  ibv_device_attr_ex attr{};
  ASSERT_EQ(ibv_query_device_ex(ctx(), nullptr, &attr), 0);
  EXPECT_TRUE(attr.odp_caps.general_caps & IBV_ODP_SUPPORT);
  EXPECT_TRUE(attr.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT);
  const uint32_t rc = attr.odp_caps.per_transport_caps.rc_odp_caps;
  for (uint32_t op : {IBV_ODP_SUPPORT_SEND, IBV_ODP_SUPPORT_RECV, IBV_ODP_SUPPORT_WRITE,
                      IBV_ODP_SUPPORT_READ, IBV_ODP_SUPPORT_ATOMIC, IBV_ODP_SUPPORT_SRQ_RECV})
    EXPECT_TRUE(rc & op) << op;
}

TEST_F(OdpTest, PagesMappedAfterRegistrationAreTheOnesReached) {
  Pages pages(2);
  ibv_mr* mr = Register(pages.base, pages.length);
  ASSERT_NE(mr, nullptr);
  // Replace the second page after registration: the region follows the address space.
  void* fresh = mmap(pages.base + kPage, kPage, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  ASSERT_NE(fresh, MAP_FAILED);
  std::memset(fresh, 0x11, kPage);
  EXPECT_TRUE(completed(Access(mr->rkey, pages.addr(kPage), IBV_WR_RDMA_READ), 3));
  EXPECT_TRUE(source_.all(0x11));
  source_.fill(0x6b);
  EXPECT_TRUE(completed(Access(mr->rkey, pages.addr(kPage + 64)), 3));
  EXPECT_EQ(pages.base[kPage + 64], 0x6b);
}

TEST_F(OdpTest, AHoleInTheRegionFailsTheAccessNotTheProcess) {
  Pages pages(2);
  ibv_mr* mr = Register(pages.base, pages.length);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(munmap(pages.base + kPage, kPage), 0);
  EXPECT_TRUE(completed(Access(mr->rkey, pages.addr(kPage)), 3, IBV_WC_REM_ACCESS_ERR));
  ASSERT_NE(mmap(pages.base + kPage, kPage, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
            MAP_FAILED);  // Pages unmaps both again
}

TEST_F(OdpTest, RegistrationNeedsNoPagesYet) {
  Pages pages(4);
  ASSERT_EQ(munmap(pages.base, pages.length), 0);
  EXPECT_NE(Register(pages.base, pages.length), nullptr) << "nothing is pinned";
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd(), pages.base, pages.length, kRemoteAccess), nullptr)
      << "a pinned registration checks the pages";
  EXPECT_EQ(errno, EFAULT);
  ASSERT_NE(mmap(pages.base, pages.length, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
            MAP_FAILED);
}

TEST_F(OdpTest, TheImplicitRegionCoversAnyAddress) {
  ibv_mr* all = Register(nullptr, SIZE_MAX);
  ASSERT_NE(all, nullptr);
  Buffer plain = NewBuffer(64, kRemoteAccess, 0);  // registered separately, reached anyway
  std::vector<uint8_t> heap(128, 0x22);
  const ibv_sge from_heap{reinterpret_cast<uintptr_t>(heap.data()), 64, all->lkey};
  ASSERT_EQ(post_send(p_.a, rdma_wr(4, IBV_WR_RDMA_WRITE, plain.addr(), all->rkey), {from_heap}),
            0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 4));
  EXPECT_TRUE(plain.all(0x22));
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd(), nullptr, SIZE_MAX, kRemoteAccess), nullptr) << "only on demand";
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(OdpTest, AdviseMrPrefetchesOnDemandRegionsOnly) {
  Pages pages(2);
  ibv_mr* mr = Register(pages.base, pages.length);
  ASSERT_NE(mr, nullptr);
  ibv_sge sge{pages.addr(), static_cast<uint32_t>(pages.length), mr->lkey};
  EXPECT_EQ(
      ibv_advise_mr(pd(), IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1),
      0);
  EXPECT_EQ(ibv_advise_mr(pd(), IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &sge, 1), 0);
  EXPECT_EQ(ibv_advise_mr(pd(), static_cast<ibv_advise_mr_advice>(3), 0, &sge, 1), EINVAL);
  ibv_sge pinned = source_.sge();
  EXPECT_EQ(ibv_advise_mr(pd(), IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &pinned, 1), EINVAL);
  sge.length += 1;
  EXPECT_EQ(ibv_advise_mr(pd(), IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), EINVAL)
      << "beyond the region";
}

}  // namespace
}  // namespace softrdma_test

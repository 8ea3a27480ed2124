// Thread domains and parent domains: made and freed in dependency order (EBUSY otherwise),
// bad attributes refused, and QPs, CQs and MRs of a parent domain carrying traffic with the
// protection of the PD it stands for.
#include "verbs_fixture.hpp"

namespace softrdma_test {
namespace {

void* never_used_alloc(ibv_pd*, void*, size_t, size_t, uint64_t) {
  return IBV_ALLOCATOR_USE_DEFAULT;
}
void never_used_free(ibv_pd*, void*, void*, uint64_t) {}

class ParentDomainTest : public VerbsTest {
 protected:
  ibv_pd* NewParent(ibv_td* td = nullptr, bool allocators = false) {
    ibv_parent_domain_init_attr attr{};
    attr.pd = pd();
    attr.td = td;
    if (allocators) {
      attr.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
      attr.alloc = never_used_alloc;
      attr.free = never_used_free;
    }
    return ibv_alloc_parent_domain(ctx(), &attr);
  }
};

TEST_F(ParentDomainTest, DomainsAreFreedInDependencyOrder) {
  ibv_td_init_attr td_attr{};
  ibv_td* td = ibv_alloc_td(ctx(), &td_attr);
  ASSERT_NE(td, nullptr) << std::strerror(errno);
  ibv_pd* parent = NewParent(td, true);
  ASSERT_NE(parent, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_dealloc_td(td), EBUSY) << "the parent domain uses it";
  EXPECT_EQ(ibv_dealloc_pd(pd()), EBUSY) << "the parent domain stands for it";
  EXPECT_EQ(ibv_dealloc_pd(parent), 0);
  EXPECT_EQ(ibv_dealloc_td(td), 0);
}

TEST_F(ParentDomainTest, BadAttributesAreRefused) {
  ibv_parent_domain_init_attr attr{};
  errno = 0;
  EXPECT_EQ(ibv_alloc_parent_domain(ctx(), &attr), nullptr) << "no PD";
  EXPECT_EQ(errno, EINVAL);
  attr.pd = pd();
  attr.comp_mask = 1u << 7;
  EXPECT_EQ(ibv_alloc_parent_domain(ctx(), &attr), nullptr) << "unknown comp_mask bit";
  attr.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
  EXPECT_EQ(ibv_alloc_parent_domain(ctx(), &attr), nullptr) << "allocators missing";
  ibv_pd* parent = NewParent();
  ASSERT_NE(parent, nullptr);
  attr = {};
  attr.pd = parent;
  EXPECT_EQ(ibv_alloc_parent_domain(ctx(), &attr), nullptr) << "a parent of a parent";
  ibv_td_init_attr td_attr{1};
  EXPECT_EQ(ibv_alloc_td(ctx(), &td_attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // The PD a CQ names must be a parent domain.
  ibv_cq_init_attr_ex cq_attr{};
  cq_attr.cqe = 16;
  cq_attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  cq_attr.parent_domain = pd();
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx(), &cq_attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_dealloc_pd(parent), 0);
}

TEST_F(ParentDomainTest, ItsQpsCqsAndRegionsCarryTraffic) {
  ibv_pd* parent = NewParent(nullptr, true);
  ASSERT_NE(parent, nullptr);
  ibv_cq_init_attr_ex cq_attr{};
  cq_attr.cqe = 64;
  cq_attr.wc_flags = IBV_WC_STANDARD_FLAGS;
  cq_attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  cq_attr.parent_domain = parent;
  ibv_cq_ex* cq_ex = ibv_create_cq_ex(ctx(), &cq_attr);
  ASSERT_NE(cq_ex, nullptr) << std::strerror(errno);
  ibv_cq* cq = ibv_cq_ex_to_cq(cq_ex);
  ibv_qp* a = create_qp(parent, IBV_QPT_RC, cq, cq);
  ibv_qp* b = create_qp(parent, IBV_QPT_RC, cq, cq);
  ASSERT_TRUE(a && b);
  ASSERT_EQ(rc_connect(a, b->qp_num, gid0(), RcParams{}), 0);
  ASSERT_EQ(rc_connect(b, a->qp_num, gid0(), RcParams{}), 0);
  Buffer src = allocate_buffer(64, 0x3a), dst = allocate_buffer(64, 0);
  src.mr.reset(ibv_reg_mr(parent, src.data(), 64, kRemoteAccess));
  dst.mr.reset(ibv_reg_mr(pd(), dst.data(), 64, kRemoteAccess));  // the PD it stands for
  ASSERT_TRUE(src.mr && dst.mr);
  ASSERT_EQ(post_send(a, rdma_wr(1, IBV_WR_RDMA_WRITE, dst.addr(), dst.rkey()), {src.sge()}), 0);
  EXPECT_TRUE(completed(poll_one(cq), 1));
  EXPECT_TRUE(dst.all(0x3a));
  EXPECT_EQ(ibv_dealloc_pd(parent), EBUSY) << "its QPs, CQ and region";
  src.mr.reset();
  EXPECT_EQ(ibv_destroy_qp(a), 0);
  EXPECT_EQ(ibv_destroy_qp(b), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(parent), 0);
}

}  // namespace
}  // namespace softrdma_test

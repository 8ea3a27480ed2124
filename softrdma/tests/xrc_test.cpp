// XRC: domains opened through files (and shared by processes that open the same file),
// XRC SRQs, XRC_SEND QPs whose requests name the SRQ that takes them, and XRC_RECV QPs that
// deliver them there, with the SRQ's PD, CQ and memory. Bad input: every misuse of the
// objects is refused with its errno, and a request naming an SRQ that is not in the target
// QP's domain fails (remote invalid request) without touching that SRQ.
#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "fork_child.hpp"
#include "verbs_fixture.hpp"

namespace softrdma_test {
namespace {

struct CloseXrcd {
  void operator()(ibv_xrcd* p) const { EXPECT_EQ(ibv_close_xrcd(p), 0); }
};
using XrcdPtr = std::unique_ptr<ibv_xrcd, CloseXrcd>;

/// A file for domains to be named by, removed at the end.
class DomainFile {
 public:
  DomainFile() {
    char name[] = "/tmp/softrdma-xrc-XXXXXX";
    fd_ = mkstemp(name);
    path_ = name;
  }
  ~DomainFile() {
    if (fd_ >= 0) close(fd_);
    unlink(path_.c_str());
  }
  DomainFile(const DomainFile&) = delete;
  DomainFile& operator=(const DomainFile&) = delete;
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// Plain helpers (no gtest): a fork()ed child uses them too.
ibv_xrcd* open_domain(ibv_context* ctx, int fd, int oflags) {
  ibv_xrcd_init_attr attr{};
  attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  attr.fd = fd;
  attr.oflags = oflags;
  return ibv_open_xrcd(ctx, &attr);
}

ibv_srq* create_xrc_srq(ibv_context* ctx, ibv_pd* pd, ibv_xrcd* xrcd, ibv_cq* cq,
                        uint32_t max_wr = 16) {
  ibv_srq_init_attr_ex attr{};
  attr.attr.max_wr = max_wr;
  attr.attr.max_sge = 2;
  attr.comp_mask =
      IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_XRCD;
  attr.srq_type = IBV_SRQT_XRC;
  attr.pd = pd;
  attr.cq = cq;
  attr.xrcd = xrcd;
  return ibv_create_srq_ex(ctx, &attr);
}

ibv_qp* create_xrc_recv(ibv_context* ctx, ibv_xrcd* xrcd) {
  ibv_qp_init_attr_ex attr{};
  attr.qp_type = IBV_QPT_XRC_RECV;
  attr.comp_mask = IBV_QP_INIT_ATTR_XRCD;
  attr.xrcd = xrcd;
  return ibv_create_qp_ex(ctx, &attr);
}

ibv_qp* create_xrc_send(ibv_context* ctx, ibv_pd* pd, ibv_cq* cq) {
  ibv_qp_init_attr_ex attr{};
  attr.qp_type = IBV_QPT_XRC_SEND;
  attr.comp_mask = IBV_QP_INIT_ATTR_PD;
  attr.pd = pd;
  attr.send_cq = cq;
  attr.sq_sig_all = 1;
  attr.cap.max_send_wr = 16;
  attr.cap.max_send_sge = 2;
  return ibv_create_qp_ex(ctx, &attr);
}

uint32_t srq_number(ibv_srq* srq) {
  uint32_t n = 0;
  return ibv_get_srq_num(srq, &n) == 0 ? n : 0;
}

ibv_send_wr xrc_wr(ibv_send_wr wr, uint32_t srqn) {
  wr.qp_type.xrc.remote_srqn = srqn;
  return wr;
}

class XrcTest : public VerbsTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(VerbsTest::SetUp());
    ASSERT_GE(file_.fd(), 0);
    xrcd_.reset(open_domain(ctx(), file_.fd(), O_CREAT));
    ASSERT_NE(xrcd_, nullptr) << "ibv_open_xrcd: " << std::strerror(errno);
    send_cq_ = NewCq();
    srq_cq_ = NewCq();
  }
  void TearDown() override {
    // Everything in the domain goes before the domain.
    xrc_qps_.clear();
    xrc_srqs_.clear();
    xrcd_.reset();
  }

  ibv_srq* NewXrcSrq(ibv_xrcd* xrcd) {
    xrc_srqs_.emplace_back(create_xrc_srq(ctx(), pd(), xrcd, srq_cq_));
    if (!xrc_srqs_.back()) ADD_FAILURE() << "ibv_create_srq_ex: " << std::strerror(errno);
    return xrc_srqs_.back().get();
  }
  ibv_qp* Own(ibv_qp* qp) {
    if (!qp) ADD_FAILURE() << "ibv_create_qp_ex: " << std::strerror(errno);
    xrc_qps_.emplace_back(qp);
    return qp;
  }
  // An XRC_SEND QP here connected to an XRC_RECV QP of `xrcd` here.
  void Connect(ibv_xrcd* xrcd, ibv_qp** send, ibv_qp** recv) {
    *recv = Own(create_xrc_recv(ctx(), xrcd));
    *send = Own(create_xrc_send(ctx(), pd(), send_cq_));
    ASSERT_NE(*recv, nullptr);
    ASSERT_NE(*send, nullptr);
    ASSERT_EQ(rc_connect(*recv, (*send)->qp_num, gid0(), RcParams{}), 0);
    ASSERT_EQ(rc_connect(*send, (*recv)->qp_num, gid0(), RcParams{}), 0);
  }

  DomainFile file_;
  XrcdPtr xrcd_;
  ibv_cq* send_cq_ = nullptr;
  ibv_cq* srq_cq_ = nullptr;
  std::vector<SrqPtr> xrc_srqs_;
  std::vector<QpPtr> xrc_qps_;
};

TEST_F(XrcTest, DeviceAdvertisesXrc) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx(), &attr), 0);
  EXPECT_TRUE(attr.device_cap_flags & IBV_DEVICE_XRC);
}

TEST_F(XrcTest, DomainsFollowTheFileAsTheKernelHasThem) {
  DomainFile other;
  // Without O_CREAT, a file no process holds a domain for has none.
  errno = 0;
  EXPECT_EQ(open_domain(ctx(), other.fd(), 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // This file's domain exists (the fixture holds it): it opens again, not with O_EXCL.
  XrcdPtr again(open_domain(ctx(), file_.fd(), 0));
  EXPECT_NE(again, nullptr);
  errno = 0;
  EXPECT_EQ(open_domain(ctx(), file_.fd(), O_CREAT | O_EXCL), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // O_CREAT | O_EXCL on a file with no domain yet creates it.
  XrcdPtr created(open_domain(ctx(), other.fd(), O_CREAT | O_EXCL));
  EXPECT_NE(created, nullptr);
  // A private domain (no file), and what is not a valid request.
  XrcdPtr private_domain(open_domain(ctx(), -1, 0));
  EXPECT_NE(private_domain, nullptr);
  ibv_xrcd_init_attr attr{};
  attr.comp_mask = IBV_XRCD_INIT_ATTR_FD;  // OFLAGS missing
  attr.fd = file_.fd();
  errno = 0;
  EXPECT_EQ(ibv_open_xrcd(ctx(), &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(open_domain(ctx(), file_.fd(), O_CREAT | O_TRUNC), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(XrcTest, DomainWithSrqsOrQpsCannotBeClosed) {
  XrcdPtr second(open_domain(ctx(), -1, 0));
  ASSERT_NE(second, nullptr);
  ibv_srq* srq = NewXrcSrq(second.get());
  ASSERT_NE(srq, nullptr);
  EXPECT_EQ(ibv_close_xrcd(second.get()), EBUSY);
  xrc_srqs_.clear();
  ibv_qp* recv = Own(create_xrc_recv(ctx(), second.get()));
  ASSERT_NE(recv, nullptr);
  EXPECT_EQ(ibv_close_xrcd(second.get()), EBUSY);
  xrc_qps_.clear();
}

TEST_F(XrcTest, MisusedObjectsAreRefused) {
  // XRC_RECV needs its domain; XRC_SEND needs a PD and a send CQ and takes no SRQ.
  ibv_qp_init_attr_ex recv_attr{};
  recv_attr.qp_type = IBV_QPT_XRC_RECV;
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(ctx(), &recv_attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_srq* srq = NewXrcSrq(xrcd_.get());
  ASSERT_NE(srq, nullptr);
  ibv_qp_init_attr_ex send_attr{};
  send_attr.qp_type = IBV_QPT_XRC_SEND;
  send_attr.comp_mask = IBV_QP_INIT_ATTR_PD;
  send_attr.pd = pd();
  send_attr.send_cq = send_cq_;
  send_attr.srq = srq;
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(ctx(), &send_attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // An XRC SRQ needs its CQ and domain; only XRC SRQs have numbers.
  ibv_srq_init_attr_ex no_cq{};
  no_cq.attr.max_wr = 4;
  no_cq.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD;
  no_cq.srq_type = IBV_SRQT_XRC;
  no_cq.pd = pd();
  no_cq.xrcd = xrcd_.get();
  errno = 0;
  EXPECT_EQ(ibv_create_srq_ex(ctx(), &no_cq), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_srq* basic = NewSrq(4);
  uint32_t n = 0;
  EXPECT_EQ(ibv_get_srq_num(basic, &n), EINVAL);
  EXPECT_NE(srq_number(srq), 0u);
  // Neither half of XRC takes receives; the receiving half posts nothing.
  ibv_qp *send = nullptr, *recv = nullptr;
  ASSERT_NO_FATAL_FAILURE(Connect(xrcd_.get(), &send, &recv));
  Buffer b = NewBuffer(64);
  EXPECT_EQ(post_recv(send, 1, {b.sge()}), EINVAL);
  EXPECT_EQ(post_recv(recv, 1, {b.sge()}), EINVAL);
  EXPECT_EQ(post_send(recv, send_wr(1), {b.sge()}), EINVAL);
  // SEND_WITH_INV needs a window bound through the receiving QP, which XRC cannot have.
  ibv_send_wr inv = xrc_wr(send_wr(2, IBV_WR_SEND_WITH_INV), srq_number(srq));
  EXPECT_EQ(post_send(send, inv, {b.sge()}), EINVAL);
}

TEST_F(XrcTest, SendsLandInTheNamedSrqWithTheTargetQpNumber) {
  ibv_srq* first = NewXrcSrq(xrcd_.get());
  ibv_srq* second = NewXrcSrq(xrcd_.get());
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  ibv_qp *send = nullptr, *recv = nullptr;
  ASSERT_NO_FATAL_FAILURE(Connect(xrcd_.get(), &send, &recv));
  Buffer src = NewBuffer(64, kRemoteAccess, 7);
  Buffer dst = NewBuffer(128, kRemoteAccess, 0);
  ASSERT_EQ(post_srq_recv(first, 10, {dst.sge(0, 64)}), 0);
  ASSERT_EQ(post_srq_recv(second, 20, {dst.sge(64, 64)}), 0);

  ibv_send_wr imm = xrc_wr(send_wr(2, IBV_WR_SEND_WITH_IMM), srq_number(second));
  imm.imm_data = htonl(0x1234);
  ASSERT_EQ(post_send(send, imm, {src.sge(0, 16)}), 0);
  EXPECT_TRUE(completed(poll_one(send_cq_), 2));
  const ibv_wc got = poll_one(srq_cq_);
  EXPECT_TRUE(completed(got, 20));
  EXPECT_EQ(got.qp_num, recv->qp_num);
  EXPECT_EQ(got.src_qp, send->qp_num);
  EXPECT_EQ(got.byte_len, 16u);
  EXPECT_TRUE(got.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(got.imm_data), 0x1234u);
  EXPECT_TRUE(dst.all(7, 64, 16));
  EXPECT_TRUE(dst.all(0, 0, 64)) << "the other SRQ's receive is untouched";

  ASSERT_EQ(post_send(send, xrc_wr(send_wr(3), srq_number(first)), {src.sge(0, 32)}), 0);
  EXPECT_TRUE(completed(poll_one(send_cq_), 3));
  EXPECT_TRUE(completed(poll_one(srq_cq_), 10));
  EXPECT_TRUE(dst.all(7, 0, 32));
}

TEST_F(XrcTest, OneSidedOperationsUseTheSrqsProtectionDomain) {
  ibv_srq* srq = NewXrcSrq(xrcd_.get());
  ASSERT_NE(srq, nullptr);
  ibv_qp *send = nullptr, *recv = nullptr;
  ASSERT_NO_FATAL_FAILURE(Connect(xrcd_.get(), &send, &recv));
  const uint32_t srqn = srq_number(srq);
  Buffer local = NewBuffer(64, kRemoteAccess, 5);
  Buffer target = NewBuffer(64, kRemoteAccess, 0);

  ASSERT_EQ(
      post_send(send, xrc_wr(rdma_wr(1, IBV_WR_RDMA_WRITE, target.addr(), target.rkey()), srqn),
                {local.sge(0, 32)}),
      0);
  EXPECT_TRUE(completed(poll_one(send_cq_), 1));
  EXPECT_TRUE(target.all(5, 0, 32));

  std::memset(target.data() + 32, 9, 32);
  ASSERT_EQ(
      post_send(send, xrc_wr(rdma_wr(2, IBV_WR_RDMA_READ, target.addr(32), target.rkey()), srqn),
                {local.sge(32, 32)}),
      0);
  EXPECT_TRUE(completed(poll_one(send_cq_), 2));
  EXPECT_TRUE(local.all(9, 32, 32));

  uint64_t word = 40;
  std::memcpy(target.data(), &word, sizeof word);
  ASSERT_EQ(
      post_send(
          send,
          xrc_wr(atomic_wr(3, IBV_WR_ATOMIC_FETCH_AND_ADD, target.addr(), target.rkey(), 2), srqn),
          {local.sge(0, 8)}),
      0);
  EXPECT_TRUE(completed(poll_one(send_cq_), 3));
  std::memcpy(&word, target.data(), sizeof word);
  EXPECT_EQ(word, 42u);
  std::memcpy(&word, local.data(), sizeof word);
  EXPECT_EQ(word, 40u);
  EXPECT_TRUE(no_completion(srq_cq_)) << "one-sided operations consume no receive";
}

TEST_F(XrcTest, RegionOfAnotherPdThanTheSrqsIsARemoteAccessError) {
  ibv_srq* srq = NewXrcSrq(xrcd_.get());
  ASSERT_NE(srq, nullptr);
  ibv_qp *send = nullptr, *recv = nullptr;
  ASSERT_NO_FATAL_FAILURE(Connect(xrcd_.get(), &send, &recv));
  PdPtr other(ibv_alloc_pd(ctx()));
  ASSERT_NE(other, nullptr);
  Buffer foreign = allocate_buffer(64, 3);
  foreign.mr.reset(ibv_reg_mr(other.get(), foreign.data(), 64, kRemoteAccess));
  ASSERT_NE(foreign.mr, nullptr);
  Buffer local = NewBuffer(64, kRemoteAccess, 1);
  ASSERT_EQ(post_send(send,
                      xrc_wr(rdma_wr(1, IBV_WR_RDMA_WRITE, foreign.addr(), foreign.rkey()),
                             srq_number(srq)),
                      {local.sge(0, 16)}),
            0);
  EXPECT_TRUE(completed(poll_one(send_cq_), 1, IBV_WC_REM_ACCESS_ERR));
  EXPECT_TRUE(foreign.all(3));
}

// A request naming no SRQ, an SRQ of another domain, or a QP that is not an SRQ: the
// target QP refuses it as an invalid request and goes to ERROR; no SRQ sees anything.
class XrcBadSrqNumber : public XrcTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(XrcBadSrqNumber, FailsTheRequestAndTheTargetQp) {
  XrcdPtr other_domain(open_domain(ctx(), -1, 0));
  ASSERT_NE(other_domain, nullptr);
  ibv_srq* own = NewXrcSrq(xrcd_.get());
  ibv_srq* foreign = NewXrcSrq(other_domain.get());
  ASSERT_NE(own, nullptr);
  ASSERT_NE(foreign, nullptr);
  ibv_qp *send = nullptr, *recv = nullptr;
  ASSERT_NO_FATAL_FAILURE(Connect(xrcd_.get(), &send, &recv));
  Buffer b = NewBuffer(64, kRemoteAccess, 0);
  ASSERT_EQ(post_srq_recv(own, 1, {b.sge(0, 32)}), 0);
  ASSERT_EQ(post_srq_recv(foreign, 2, {b.sge(32, 32)}), 0);

  const std::string which = GetParam();
  const uint32_t srqn = which == "another_domain" ? srq_number(foreign)
                        : which == "a_qp"         ? send->qp_num
                                                  : 0xABCDEu;
  Buffer src = NewBuffer(16, kRemoteAccess, 6);
  ASSERT_EQ(post_send(send, xrc_wr(send_wr(5), srqn), {src.sge()}), 0);
  EXPECT_TRUE(completed(poll_one(send_cq_), 5, IBV_WC_REM_INV_REQ_ERR));
  EXPECT_EQ(qp_state(recv), IBV_QPS_ERR);
  EXPECT_TRUE(no_completion(srq_cq_));
  EXPECT_TRUE(b.all(0));
  xrc_qps_.clear();
  xrc_srqs_.clear();
}

INSTANTIATE_TEST_SUITE_P(Srqn, XrcBadSrqNumber, ::testing::Values("none", "another_domain", "a_qp"),
                         [](const auto& param_info) { return std::string(param_info.param); });

// The domain of a file is shared: an SRQ that another process created in it takes the
// requests that this process's XRC_RECV QP receives, into that process's memory.
TEST_F(XrcTest, SrqOfAnotherProcessInTheSameFileDomainTakesTheRequests) {
  struct Announce {
    uint32_t srqn;
    uint32_t pad;
  };
  constexpr uint8_t kByte = 0x5A;
  const std::string path = file_.path();
  Link link;
  ASSERT_TRUE(link.ok());
  Child child(link, [&]() -> int {
    ibv_device** list = ibv_get_device_list(nullptr);
    ibv_context* c = list ? ibv_open_device(list[0]) : nullptr;
    const int fd = open(path.c_str(), O_RDONLY);
    ibv_pd* p = c ? ibv_alloc_pd(c) : nullptr;
    ibv_cq* cq = c ? ibv_create_cq(c, 16, nullptr, nullptr, 0) : nullptr;
    ibv_xrcd* x = c ? open_domain(c, fd, 0) : nullptr;  // joins; does not create
    ibv_srq* srq = x && p && cq ? create_xrc_srq(c, p, x, cq) : nullptr;
    Buffer b = allocate_buffer(64, 0);
    ibv_mr* mr = p ? ibv_reg_mr(p, b.data(), 64, IBV_ACCESS_LOCAL_WRITE) : nullptr;
    if (!srq || !mr) return 2;
    ibv_sge sge{b.addr(), 64, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = 77;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (ibv_post_srq_recv(srq, &wr, &bad) != 0) return 3;
    if (!link.send(Announce{srq_number(srq), 0})) return 4;
    ibv_wc wc{};
    if (!poll_wc(cq, kTimeout, &wc) || wc.status != IBV_WC_SUCCESS || wc.wr_id != 77) return 5;
    if (!b.all(kByte, 0, 24) || !b.all(0, 24)) return 6;
    return 0;  // the process ends: its objects go with it
  });
  ASSERT_TRUE(child.started());
  // Connected after the fork (see Child).
  ibv_qp *send = nullptr, *recv = nullptr;
  ASSERT_NO_FATAL_FAILURE(Connect(xrcd_.get(), &send, &recv));
  Announce a{};
  ASSERT_TRUE(link.receive(&a));
  ASSERT_NE(a.srqn, 0u);
  Buffer src = NewBuffer(24, kRemoteAccess, kByte);
  ASSERT_EQ(post_send(send, xrc_wr(send_wr(1), a.srqn), {src.sge()}), 0);
  EXPECT_TRUE(completed(poll_one(send_cq_), 1));
  EXPECT_TRUE(exited_with(child.Wait(), 0));
}

}  // namespace
}  // namespace softrdma_test

// The extended send API: QPs created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, work requests
// built with ibv_wr_start / ibv_wr_<opcode> / ibv_wr_set_* and posted by ibv_wr_complete,
// all of a batch or none of it.
#include <arpa/inet.h>

#include "verbs_fixture.hpp"

namespace softrdma_test {
namespace {

constexpr uint64_t kRcOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                            IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                            IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                            IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_ATOMIC_WRITE |
                            IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
                            IBV_QP_EX_WITH_SEND_WITH_INV;

class QpExTest : public RcLoopbackTest {
 protected:
  // A QP with the extended send API (nullptr and errno on failure), owned by the test.
  ibv_qp* NewQpEx(ibv_qp_type type, ibv_cq* cq, uint64_t send_ops, uint32_t send_wr = 16) {
    ibv_qp_init_attr_ex a{};
    a.qp_type = type;
    a.send_cq = cq;
    a.recv_cq = cq;
    a.cap.max_send_wr = send_wr;
    a.cap.max_recv_wr = 16;
    a.cap.max_send_sge = 2;
    a.cap.max_recv_sge = 2;
    a.cap.max_inline_data = 64;
    a.pd = pd();
    a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.send_ops_flags = send_ops;
    ibv_qp* qp = ibv_create_qp_ex(ctx(), &a);
    if (qp) owned_.emplace_back(qp);
    return qp;
  }

  // An RC requester `a_` with the extended API, connected to a plain RC responder `b_`.
  void ConnectExPair(uint32_t send_wr = 16) {
    cq_a_ = NewCq();
    cq_b_ = NewCq();
    a_ = NewQpEx(IBV_QPT_RC, cq_a_, kRcOps, send_wr);
    ASSERT_NE(a_, nullptr) << std::strerror(errno);
    b_ = NewQp(IBV_QPT_RC, cq_b_, cq_b_);
    ASSERT_NE(b_, nullptr);
    ASSERT_EQ(rc_connect(a_, b_->qp_num, gid0(), RcParams{}), 0);
    ASSERT_EQ(rc_connect(b_, a_->qp_num, gid0(), RcParams{}), 0);
    x_ = ibv_qp_to_qp_ex(a_);
    ASSERT_NE(x_, nullptr);
  }

  std::vector<QpPtr> owned_;
  ibv_cq* cq_a_ = nullptr;
  ibv_cq* cq_b_ = nullptr;
  ibv_qp* a_ = nullptr;
  ibv_qp* b_ = nullptr;
  ibv_qp_ex* x_ = nullptr;
};

TEST_F(QpExTest, EveryRcOperationOfOneBatchCompletesInOrder) {
  ASSERT_NO_FATAL_FAILURE(ConnectExPair());
  Buffer local = NewBuffer(256, kRemoteAccess, 0);
  Buffer remote = NewBuffer(256, kRemoteAccess, 0);
  Buffer inbox = NewBuffer(64, kRemoteAccess, 0);
  std::memset(local.data(), 0xA1, 64);
  std::memset(remote.data() + 64, 0xB2, 64);
  uint64_t counter = 40;
  std::memcpy(remote.data() + 128, &counter, 8);
  uint64_t swapped = 7;
  std::memcpy(remote.data() + 136, &swapped, 8);
  ASSERT_EQ(post_recv(b_, 100, {inbox.sge()}), 0);
  ASSERT_EQ(post_recv(b_, 101, {inbox.sge()}), 0);
  char message[] = "through ibv_wr_send_imm";

  ibv_wr_start(x_);
  x_->wr_id = 1;
  x_->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(x_, remote.rkey(), remote.addr(0));
  ibv_wr_set_sge(x_, local.lkey(), local.addr(0), 64);
  x_->wr_id = 2;
  ibv_wr_rdma_read(x_, remote.rkey(), remote.addr(64));
  ibv_wr_set_sge(x_, local.lkey(), local.addr(64), 64);
  x_->wr_id = 3;
  ibv_wr_atomic_fetch_add(x_, remote.rkey(), remote.addr(128), 2);
  ibv_wr_set_sge(x_, local.lkey(), local.addr(128), 8);
  x_->wr_id = 4;
  ibv_wr_atomic_cmp_swp(x_, remote.rkey(), remote.addr(136), 7, 9);
  ibv_wr_set_sge(x_, local.lkey(), local.addr(136), 8);
  x_->wr_id = 5;
  x_->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_wr_send_imm(x_, htonl(0x1234));
  ibv_wr_set_inline_data(x_, message, sizeof message);
  x_->wr_id = 6;
  x_->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write_imm(x_, remote.rkey(), remote.addr(192), htonl(0x5678));
  ibv_wr_set_sge(x_, local.lkey(), local.addr(0), 16);
  ASSERT_EQ(ibv_wr_complete(x_), 0);

  const std::vector<ibv_wc> sent = poll_n(cq_a_, 6);
  const ibv_wc_opcode opcodes[] = {IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_FETCH_ADD,
                                   IBV_WC_COMP_SWAP,  IBV_WC_SEND,      IBV_WC_RDMA_WRITE};
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_TRUE(completed(sent[i], i + 1)) << "work request " << i + 1;
    EXPECT_EQ(sent[i].opcode, opcodes[i]) << "work request " << i + 1;
  }
  EXPECT_TRUE(remote.all(0xA1, 0, 64));
  EXPECT_TRUE(local.all(0xB2, 64, 64));
  uint64_t value = 0;
  std::memcpy(&value, local.data() + 128, 8);
  EXPECT_EQ(value, 40u);
  std::memcpy(&value, remote.data() + 128, 8);
  EXPECT_EQ(value, 42u);
  std::memcpy(&value, local.data() + 136, 8);
  EXPECT_EQ(value, 7u);
  std::memcpy(&value, remote.data() + 136, 8);
  EXPECT_EQ(value, 9u);
  EXPECT_TRUE(remote.all(0xA1, 192, 16));

  const std::vector<ibv_wc> received = poll_n(cq_b_, 2);
  ASSERT_EQ(received.size(), 2u);
  EXPECT_TRUE(completed(received[0], 100));
  EXPECT_EQ(received[0].byte_len, sizeof message);
  EXPECT_TRUE(received[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(received[0].imm_data), 0x1234u);
  EXPECT_TRUE(completed(received[1], 101));
  EXPECT_EQ(received[1].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(ntohl(received[1].imm_data), 0x5678u);
}

// Inline data belongs to the work request once set: the application's buffer may change
// before ibv_wr_complete. A list of inline buffers arrives as one message.
TEST_F(QpExTest, InlineDataIsCopiedWhenSet) {
  ASSERT_NO_FATAL_FAILURE(ConnectExPair());
  Buffer inbox = NewBuffer(64, kRemoteAccess, 0);
  ASSERT_EQ(post_recv(b_, 7, {inbox.sge()}), 0);
  char head[4] = {'a', 'b', 'c', 'd'};
  char tail[3] = {'x', 'y', 'z'};
  const ibv_data_buf pieces[] = {{head, sizeof head}, {tail, sizeof tail}};
  ibv_wr_start(x_);
  x_->wr_id = 1;
  x_->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_wr_send(x_);
  ibv_wr_set_inline_data_list(x_, 2, pieces);
  std::memset(head, '-', sizeof head);
  std::memset(tail, '-', sizeof tail);
  ASSERT_EQ(ibv_wr_complete(x_), 0);
  EXPECT_TRUE(completed(poll_one(cq_a_), 1));
  const ibv_wc wc = poll_one(cq_b_);
  EXPECT_TRUE(completed(wc, 7));
  EXPECT_EQ(wc.byte_len, 7u);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(inbox.data()), 7), "abcdxyz");
}

TEST_F(QpExTest, UdSendsCarryTheAddressOfEachWorkRequest) {
  constexpr uint32_t kQkey = 0x11111111;
  ibv_cq* cq_a = NewCq();
  ibv_cq* cq_b = NewCq();
  ibv_qp* a = NewQpEx(IBV_QPT_UD, cq_a, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
  ASSERT_NE(a, nullptr) << std::strerror(errno);
  ibv_qp* b = NewQp(IBV_QPT_UD, cq_b, cq_b);
  ASSERT_EQ(ud_to_rts(a, kQkey), 0);
  ASSERT_EQ(ud_to_rts(b, kQkey), 0);
  AhPtr ah = NewAh(gid0());
  Buffer out = NewBuffer(64, kRemoteAccess, 0x5e);
  Buffer in = NewBuffer(64 + 40, kRemoteAccess, 0);  // the GRH comes first
  ASSERT_EQ(post_recv(b, 9, {in.sge()}), 0);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(a);
  ASSERT_NE(x, nullptr);
  const ibv_sge pieces[] = {out.sge(0, 16), out.sge(16, 16)};
  ibv_wr_start(x);
  x->wr_id = 3;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_imm(x, htonl(77));
  ibv_wr_set_ud_addr(x, ah.get(), b->qp_num, kQkey);
  ibv_wr_set_sge_list(x, 2, pieces);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  EXPECT_TRUE(completed(poll_one(cq_a), 3));
  const ibv_wc wc = poll_one(cq_b);
  EXPECT_TRUE(completed(wc, 9));
  EXPECT_EQ(wc.byte_len, 40u + 32u);
  EXPECT_EQ(wc.src_qp, a->qp_num);
  EXPECT_EQ(ntohl(wc.imm_data), 77u);
  EXPECT_TRUE(in.all(0x5e, 40, 32));
}

// A wrong work request anywhere in the batch: ibv_wr_complete fails with EINVAL and posts
// none of them, not even those before it; the QP takes the next batch as usual.
TEST_F(QpExTest, ABatchWithAWrongWorkRequestPostsNothing) {
  ASSERT_NO_FATAL_FAILURE(ConnectExPair());
  Buffer local = NewBuffer(64, kRemoteAccess, 0x11);
  Buffer remote = NewBuffer(64, kRemoteAccess, 0);
  const ibv_sge three[] = {local.sge(0, 8), local.sge(8, 8), local.sge(16, 8)};  // max is 2
  ibv_wr_start(x_);
  x_->wr_id = 1;
  x_->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(x_, remote.rkey(), remote.addr(0));
  ibv_wr_set_sge(x_, local.lkey(), local.addr(0), 8);
  x_->wr_id = 2;
  ibv_wr_rdma_write(x_, remote.rkey(), remote.addr(8));
  ibv_wr_set_sge_list(x_, 3, three);
  EXPECT_EQ(ibv_wr_complete(x_), EINVAL);
  EXPECT_TRUE(no_completion(cq_a_));
  EXPECT_TRUE(remote.all(0, 0, 64));

  ibv_wr_start(x_);
  x_->wr_id = 3;
  ibv_wr_rdma_write(x_, remote.rkey(), remote.addr(0));
  ibv_wr_set_sge(x_, local.lkey(), local.addr(0), 8);
  ASSERT_EQ(ibv_wr_complete(x_), 0);
  EXPECT_TRUE(completed(poll_one(cq_a_), 3));
  EXPECT_TRUE(remote.all(0x11, 0, 8));
}

// More work requests than the send queue has room for: ENOMEM, none posted.
TEST_F(QpExTest, ABatchLargerThanTheSendQueueIsRefusedWhole) {
  ASSERT_NO_FATAL_FAILURE(ConnectExPair(4));
  Buffer local = NewBuffer(64, kRemoteAccess, 0x22);
  Buffer remote = NewBuffer(64, kRemoteAccess, 0);
  ibv_wr_start(x_);
  x_->wr_flags = IBV_SEND_SIGNALED;
  for (uint64_t i = 0; i < 5; ++i) {
    x_->wr_id = i;
    ibv_wr_rdma_write(x_, remote.rkey(), remote.addr(i * 8));
    ibv_wr_set_sge(x_, local.lkey(), local.addr(0), 8);
  }
  EXPECT_EQ(ibv_wr_complete(x_), ENOMEM);
  EXPECT_TRUE(no_completion(cq_a_));
  EXPECT_TRUE(remote.all(0, 0, 64));
}

// ibv_wr_abort drops what was built; a setter without an operation before it, or an
// operation outside ibv_wr_start, makes the batch fail with EINVAL.
TEST_F(QpExTest, AbortAndMisuseLeaveTheQueueUntouched) {
  ASSERT_NO_FATAL_FAILURE(ConnectExPair());
  Buffer local = NewBuffer(64, kRemoteAccess, 0x33);
  Buffer remote = NewBuffer(64, kRemoteAccess, 0);
  ibv_wr_start(x_);
  x_->wr_id = 1;
  x_->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(x_, remote.rkey(), remote.addr(0));
  ibv_wr_set_sge(x_, local.lkey(), local.addr(0), 8);
  ibv_wr_abort(x_);
  EXPECT_EQ(ibv_wr_complete(x_), EINVAL) << "complete without a start";

  ibv_wr_start(x_);
  ibv_wr_set_sge(x_, local.lkey(), local.addr(0), 8);  // no operation to set it on
  EXPECT_EQ(ibv_wr_complete(x_), EINVAL);

  ibv_wr_rdma_write(x_, remote.rkey(), remote.addr(0));  // outside start ... complete
  ibv_wr_start(x_);
  EXPECT_EQ(ibv_wr_complete(x_), 0) << "an empty batch";
  EXPECT_TRUE(no_completion(cq_a_));
  EXPECT_TRUE(remote.all(0, 0, 64));
}

TEST_F(QpExTest, AtomicWriteStoresItsEightBytesAtOnce) {
  ASSERT_NO_FATAL_FAILURE(ConnectExPair());
  Buffer remote = NewBuffer(64, kRemoteAccess, 0);
  uint64_t value = 0x1122334455667788;
  ibv_wr_start(x_);
  x_->wr_id = 5;
  x_->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_write(x_, remote.rkey(), remote.addr(8), &value);
  value = 0;  // the value was taken when the work request was built
  ASSERT_EQ(ibv_wr_complete(x_), 0);
  const ibv_wc wc = poll_one(cq_a_);
  ASSERT_TRUE(completed(wc, 5));
  EXPECT_EQ(wc.opcode, IBV_WC_ATOMIC_WRITE);
  uint64_t stored = 0;
  std::memcpy(&stored, remote.data() + 8, 8);
  EXPECT_EQ(stored, 0x1122334455667788u);
  EXPECT_TRUE(remote.all(0, 0, 8) && remote.all(0, 16));
}

TEST_F(QpExTest, AtomicWriteToAMisalignedAddressIsAnInvalidRequest) {
  ASSERT_NO_FATAL_FAILURE(ConnectExPair());
  Buffer remote = NewBuffer(64, kRemoteAccess, 0);
  const uint64_t value = 1;
  ibv_wr_start(x_);
  x_->wr_id = 6;
  x_->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_write(x_, remote.rkey(), remote.addr(4), &value);
  ASSERT_EQ(ibv_wr_complete(x_), 0);
  EXPECT_TRUE(completed(poll_one(cq_a_), 6, IBV_WC_REM_INV_REQ_ERR));
  EXPECT_TRUE(remote.all(0));
}

TEST_F(QpExTest, WindowsAreBoundAndInvalidatedThroughTheExtendedApi) {
  ASSERT_NO_FATAL_FAILURE(ConnectExPair());
  Buffer region = NewBuffer(4096, kRemoteAccess | IBV_ACCESS_MW_BIND, 0);
  Buffer source = NewBuffer(64, kRemoteAccess, 0x3c);
  ibv_mw* mw = ibv_alloc_mw(pd(), IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const uint32_t key = ibv_inc_rkey(mw->rkey);
  const ibv_mw_bind_info info{region.mr.get(), region.addr(0), 4096, IBV_ACCESS_REMOTE_WRITE};
  ibv_wr_start(x_);
  x_->wr_id = 7;
  x_->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(x_, mw, key, &info);
  ASSERT_EQ(ibv_wr_complete(x_), 0);
  ASSERT_TRUE(completed(poll_one(cq_a_), 7));
  // b_ writes into a_'s region through the window, which a_ then invalidates.
  ASSERT_EQ(post_send(b_, rdma_wr(8, IBV_WR_RDMA_WRITE, region.addr(0), key), {source.sge()}), 0);
  ASSERT_TRUE(completed(poll_one(cq_b_), 8));
  EXPECT_TRUE(region.all(0x3c, 0, 64));
  ibv_wr_start(x_);
  x_->wr_id = 9;
  ibv_wr_local_inv(x_, key);
  ASSERT_EQ(ibv_wr_complete(x_), 0);
  ASSERT_TRUE(completed(poll_one(cq_a_), 9));
  ASSERT_EQ(post_send(b_, rdma_wr(10, IBV_WR_RDMA_WRITE, region.addr(0), key), {source.sge()}), 0);
  EXPECT_TRUE(completed(poll_one(cq_b_), 10, IBV_WC_REM_ACCESS_ERR));
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST_F(QpExTest, CreationRefusesOperationsTheQpTypeLacks) {
  ibv_cq* cq = NewCq();
  errno = 0;
  EXPECT_EQ(NewQpEx(IBV_QPT_UD, cq, IBV_QP_EX_WITH_RDMA_WRITE), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  errno = 0;
  EXPECT_EQ(NewQpEx(IBV_QPT_UD, cq, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_BIND_MW), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP) << "memory windows are bound on connected QPs";
  errno = 0;
  EXPECT_EQ(NewQpEx(IBV_QPT_UD, cq, IBV_QP_EX_WITH_ATOMIC_WRITE), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP) << "atomic write is RC's";
  ibv_qp* plain = NewQp(IBV_QPT_RC, cq, cq);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(ibv_qp_to_qp_ex(plain), nullptr) << "created without send_ops_flags";
  ibv_qp* ex = NewQpEx(IBV_QPT_RC, cq, kRcOps);
  ASSERT_NE(ex, nullptr);
  EXPECT_EQ(reinterpret_cast<ibv_qp*>(ibv_qp_to_qp_ex(ex)), ex);
}

}  // namespace
}  // namespace softrdma_test

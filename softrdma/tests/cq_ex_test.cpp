// The extended CQ: ibv_create_cq_ex with the standard completion fields, polled with
// ibv_start_poll / ibv_next_poll / ibv_end_poll and read through ibv_wc_read_*.
#include <arpa/inet.h>

#include "verbs_fixture.hpp"

namespace softrdma_test {
namespace {

ibv_cq_init_attr_ex cq_attr(uint64_t wc_flags = IBV_WC_STANDARD_FLAGS, uint32_t cqe = 64) {
  ibv_cq_init_attr_ex a{};
  a.cqe = cqe;
  a.wc_flags = wc_flags;
  return a;
}

class CqExTest : public RcLoopbackTest {};

TEST_F(CqExTest, CreationTakesTheStandardFieldsAndRefusesWhatIsNotThere) {
  EXPECT_NE(NewCqEx(cq_attr()), nullptr) << std::strerror(errno);
  EXPECT_NE(NewCqEx(cq_attr(0)), nullptr) << std::strerror(errno);
  ibv_cq_init_attr_ex single = cq_attr();
  single.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  single.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
  EXPECT_NE(NewCqEx(single), nullptr) << "a hint softrdma may ignore";

  errno = 0;
  EXPECT_EQ(NewCqEx(cq_attr(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP) << "no completion timestamps";
  ibv_cq_init_attr_ex overrun = cq_attr();
  overrun.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  overrun.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  errno = 0;
  EXPECT_EQ(NewCqEx(overrun), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);

  ibv_device_attr device{};
  ASSERT_EQ(ibv_query_device(ctx(), &device), 0);
  errno = 0;
  EXPECT_EQ(NewCqEx(cq_attr(0, static_cast<uint32_t>(device.max_cqe) + 1)), nullptr);
  EXPECT_EQ(errno, EINVAL) << "more entries than the device's maximum";
  ibv_cq_init_attr_ex vector = cq_attr();
  vector.comp_vector = static_cast<uint32_t>(ctx()->num_comp_vectors) + 1;
  errno = 0;
  EXPECT_EQ(NewCqEx(vector), nullptr);
  EXPECT_EQ(errno, EINVAL) << "a completion vector the device lacks";
}

// Sends with immediate data into an extended receive CQ: each completion's fields read back
// through the accessors, ENOENT once the CQ is empty.
TEST_F(CqExTest, CompletionsReadThroughTheAccessors) {
  ibv_cq_ex* recv_cq = NewCqEx(cq_attr());
  ASSERT_NE(recv_cq, nullptr) << std::strerror(errno);
  PairOptions o;
  o.b_recv_cq = ibv_cq_ex_to_cq(recv_cq);
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  ibv_poll_cq_attr attr{};
  EXPECT_EQ(ibv_start_poll(recv_cq, &attr), ENOENT) << "nothing has arrived";

  Buffer out = NewBuffer(64, kRemoteAccess, 0x61);
  Buffer in = NewBuffer(128, kRemoteAccess, 0);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(post_recv(p_.b, 10 + i, {in.sge(i * 32, 32)}), 0);
  for (uint32_t i = 0; i < 3; ++i) {
    ibv_send_wr wr = send_wr(i, IBV_WR_SEND_WITH_IMM);
    wr.imm_data = htonl(100 + i);
    ASSERT_EQ(post_send(p_.a, wr, {out.sge(0, 8 + i)}), 0);
  }
  ASSERT_EQ(poll_n(p_.cq_a, 3).size(), 3u);

  // Every completion has arrived once the sender's have (same host, completed in order).
  ASSERT_EQ(ibv_start_poll(recv_cq, &attr), 0);
  for (uint32_t i = 0; i < 3; ++i) {
    if (i > 0) {
      ASSERT_EQ(ibv_next_poll(recv_cq), 0) << "completion " << i;
    }
    EXPECT_EQ(recv_cq->status, IBV_WC_SUCCESS);
    EXPECT_EQ(recv_cq->wr_id, 10u + i);
    EXPECT_EQ(ibv_wc_read_opcode(recv_cq), IBV_WC_RECV);
    EXPECT_EQ(ibv_wc_read_byte_len(recv_cq), 8u + i);
    EXPECT_TRUE(ibv_wc_read_wc_flags(recv_cq) & IBV_WC_WITH_IMM);
    EXPECT_EQ(ntohl(ibv_wc_read_imm_data(recv_cq)), 100u + i);
    EXPECT_EQ(ibv_wc_read_qp_num(recv_cq), p_.b->qp_num);
    EXPECT_EQ(ibv_wc_read_src_qp(recv_cq), p_.a->qp_num);
    EXPECT_EQ(ibv_wc_read_vendor_err(recv_cq), 0u);
  }
  EXPECT_EQ(ibv_next_poll(recv_cq), ENOENT);
  ibv_end_poll(recv_cq);
  EXPECT_TRUE(in.all(0x61, 0, 8));
  attr.comp_mask = 1;
  EXPECT_EQ(ibv_start_poll(recv_cq, &attr), EINVAL) << "no poll attributes are defined";
}

// An error completion carries its status, and the legacy ibv_poll_cq reads the same CQ.
TEST_F(CqExTest, ErrorsAndTheLegacyPollShareTheRing) {
  ibv_cq_ex* send_cq = NewCqEx(cq_attr());
  ASSERT_NE(send_cq, nullptr);
  PairOptions o;
  o.a_send_cq = ibv_cq_ex_to_cq(send_cq);
  ASSERT_NO_FATAL_FAILURE(ConnectPair(o));
  Buffer local = NewBuffer(64, kRemoteAccess, 0x7e);
  Buffer remote = NewBuffer(64, kRemoteAccess, 0);
  ASSERT_EQ(post_send(p_.a, rdma_wr(1, IBV_WR_RDMA_WRITE, remote.addr(), remote.rkey()),
                      {local.sge(0, 8)}),
            0);
  ASSERT_EQ(post_send(p_.a, rdma_wr(2, IBV_WR_RDMA_WRITE, remote.addr(), remote.rkey() + 1),
                      {local.sge(0, 8)}),
            0);
  ibv_poll_cq_attr attr{};
  int rc = ENOENT;
  for (int i = 0; i < 100000 && rc == ENOENT; ++i) rc = ibv_start_poll(send_cq, &attr);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(send_cq->wr_id, 1u);
  EXPECT_EQ(send_cq->status, IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_wc_read_opcode(send_cq), IBV_WC_RDMA_WRITE);
  ibv_end_poll(send_cq);
  EXPECT_TRUE(completed(poll_one(ibv_cq_ex_to_cq(send_cq)), 2, IBV_WC_REM_ACCESS_ERR));
}

}  // namespace
}  // namespace softrdma_test

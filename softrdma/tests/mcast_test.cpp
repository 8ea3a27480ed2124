// Multicast on UD QPs: ibv_attach_mcast / ibv_detach_mcast, and a send to a group (its GID,
// QP number 0xFFFFFF) reaching every attached QP with the matching qkey, each once, and no
// other. (Between processes and hosts: rdma-core's multicast tests and mckey.)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common/softrdma_port.hpp"
#include "verbs_fixture.hpp"
#include "wire/protocol.hpp"

namespace softrdma_test {
namespace {

namespace wire = softrdma::wire;

constexpr uint32_t kMulticastQpn = 0xffffff;
constexpr size_t kGrh = 40;

ibv_gid group_gid(const char* ipv4) {
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  inet_pton(AF_INET, ipv4, &g.raw[12]);
  return g;
}

class McastTest : public UdTest {
 protected:
  void SetUp() override {
    UdTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(MakeUdPair(&p_));
    cq_c_ = NewCq();
    c_ = NewQp(IBV_QPT_UD, cq_c_, cq_c_);
    ASSERT_NE(c_, nullptr);
    ASSERT_EQ(ud_to_rts(c_, kQkey), 0);
    // A group of this process's own: parallel tests never share it.
    const std::string group =
        "239.7." + std::to_string((getpid() >> 8) & 0xff) + "." + std::to_string(getpid() & 0xff);
    group_ = group_gid(group.c_str());
    ah_ = NewAh(group_);
    source_ = NewBuffer(64, kRemoteAccess, 0x4d);
  }

  // a sends 64 bytes to the group with `qkey`.
  void SendToGroup(uint64_t wr_id, uint32_t qkey = kQkey) {
    ASSERT_EQ(post_send(p_.a, ud_wr(wr_id, ah_.get(), kMulticastQpn, qkey), {source_.sge()}), 0);
    ASSERT_TRUE(completed(poll_one(p_.cq_a), wr_id));
  }

  UdPair p_;
  ibv_qp* c_ = nullptr;
  ibv_cq* cq_c_ = nullptr;
  ibv_gid group_{};
  AhPtr ah_;
  Buffer source_;
};

TEST_F(McastTest, LimitsAreAdvertised) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx(), &attr), 0);
  EXPECT_GT(attr.max_mcast_grp, 0);
  EXPECT_GT(attr.max_mcast_qp_attach, 0);
  EXPECT_GE(attr.max_total_mcast_qp_attach, attr.max_mcast_qp_attach);
}

TEST_F(McastTest, OnlyUdQpsAttachAndOnlyToMulticastGroups) {
  ibv_cq* cq = NewCq();
  ibv_qp* rc = NewQp(IBV_QPT_RC, cq, cq);
  ASSERT_NE(rc, nullptr);
  EXPECT_EQ(ibv_attach_mcast(rc, &group_, 0), EINVAL);
  const ibv_gid unicast = group_gid("192.0.2.9");
  EXPECT_EQ(ibv_attach_mcast(p_.b, &unicast, 0), EINVAL);
  EXPECT_EQ(ibv_detach_mcast(p_.b, &group_, 0), EINVAL) << "not attached";
  EXPECT_EQ(ibv_attach_mcast(p_.b, &group_, 0), 0);
  EXPECT_EQ(ibv_attach_mcast(p_.b, &group_, 0), 0) << "attaching again changes nothing";
  EXPECT_EQ(ibv_detach_mcast(p_.b, &group_, 0), 0);
  EXPECT_EQ(ibv_detach_mcast(p_.b, &group_, 0), EINVAL);
}

TEST_F(McastTest, EveryAttachedQpReceivesOnceWithTheGroupInItsGrh) {
  ASSERT_EQ(ibv_attach_mcast(p_.b, &group_, 0), 0);
  ASSERT_EQ(ibv_attach_mcast(c_, &group_, 0), 0);
  Buffer inbox_b = NewBuffer(kGrh + 64), inbox_c = NewBuffer(kGrh + 64);
  for (uint64_t i = 0; i < 2; ++i) {
    ASSERT_EQ(post_recv(p_.b, 10 + i, {inbox_b.sge()}), 0);
    ASSERT_EQ(post_recv(c_, 20 + i, {inbox_c.sge()}), 0);
  }
  ASSERT_NO_FATAL_FAILURE(SendToGroup(1));
  const ibv_wc at_b = poll_one(p_.cq_b);
  const ibv_wc at_c = poll_one(cq_c_);
  ASSERT_TRUE(completed(at_b, 10));
  ASSERT_TRUE(completed(at_c, 20));
  EXPECT_EQ(at_b.byte_len, kGrh + 64);
  EXPECT_EQ(at_b.src_qp, p_.a->qp_num);
  EXPECT_TRUE(inbox_b.all(0x4d, kGrh));
  EXPECT_TRUE(inbox_c.all(0x4d, kGrh));
  // The IPv4 header in the GRH's last 20 bytes names the group as its destination.
  EXPECT_EQ(std::memcmp(inbox_b.data() + 20 + 16, &group_.raw[12], 4), 0);
  EXPECT_TRUE(no_completion(p_.cq_b)) << "one copy each";
  EXPECT_TRUE(no_completion(cq_c_));
}

TEST_F(McastTest, DetachedOrForeignQkeyQpsReceiveNothing) {
  ASSERT_EQ(ibv_attach_mcast(p_.b, &group_, 0), 0);
  ASSERT_EQ(ibv_attach_mcast(c_, &group_, 0), 0);
  ASSERT_EQ(ibv_detach_mcast(c_, &group_, 0), 0);
  Buffer inbox_b = NewBuffer(kGrh + 64), inbox_c = NewBuffer(kGrh + 64);
  ASSERT_EQ(post_recv(p_.b, 10, {inbox_b.sge()}), 0);
  ASSERT_EQ(post_recv(c_, 20, {inbox_c.sge()}), 0);
  ASSERT_NO_FATAL_FAILURE(SendToGroup(1, kQkey + 1));
  EXPECT_TRUE(no_completion(p_.cq_b)) << "another qkey";
  ASSERT_NO_FATAL_FAILURE(SendToGroup(2));
  EXPECT_TRUE(completed(poll_one(p_.cq_b), 10));
  EXPECT_TRUE(no_completion(cq_c_)) << "detached";
}

TEST_F(McastTest, ADestroyedQpLeavesItsGroups) {
  ASSERT_EQ(ibv_attach_mcast(c_, &group_, 0), 0);
  ASSERT_EQ(DestroyQpNow(c_), 0);
  ASSERT_EQ(ibv_attach_mcast(p_.b, &group_, 0), 0);
  Buffer inbox = NewBuffer(kGrh + 64);
  ASSERT_EQ(post_recv(p_.b, 10, {inbox.sge()}), 0);
  ASSERT_NO_FATAL_FAILURE(SendToGroup(1));
  EXPECT_TRUE(completed(poll_one(p_.cq_b), 10));
}

// What another host's sender puts on the network: the wire header, then the payload.
std::vector<char> datagram(const ibv_gid& from, const ibv_gid& group, uint32_t qkey) {
  wire::Request h{};
  h.magic = wire::kMagic;
  h.kind = wire::Kind::kRequest;
  h.opcode = IBV_WR_SEND;
  h.qp_type = IBV_QPT_UD;
  h.dest_qpn = kMulticastQpn;
  h.src_qpn = 0xabcdef;  // in no range of this host's registries: from elsewhere
  h.qkey = qkey;
  h.length = h.payload_len = 64;
  std::memcpy(h.src_gid, from.raw, 16);
  std::memcpy(h.dst_gid, group.raw, 16);
  std::vector<char> d(sizeof h + 64, '\x5e');
  std::memcpy(d.data(), &h, sizeof h);
  return d;
}

// Datagrams from elsewhere reach this process's members; malformed ones are dropped and
// the receiver goes on.
TEST_F(McastTest, DatagramsFromOtherHostsAreCheckedAndDelivered) {
  ASSERT_EQ(ibv_attach_mcast(p_.b, &group_, 0), 0);
  Buffer inbox = NewBuffer(kGrh + 64);
  ASSERT_EQ(post_recv(p_.b, 10, {inbox.sge()}), 0);
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  in_addr from{};
  std::memcpy(&from, &gid0().raw[12], 4);
  setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &from, sizeof from);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(softrdma::kDefaultPort);
  std::memcpy(&to.sin_addr, &group_.raw[12], 4);
  const auto send_datagram = [&](const std::vector<char>& d) {
    return sendto(fd, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to) ==
           static_cast<ssize_t>(d.size());
  };
  ibv_gid elsewhere = group_gid("198.18.0.1");
  const std::vector<char> good = datagram(elsewhere, group_, kQkey);
  const std::vector<char> truncated(good.begin(), good.end() - 1);
  std::vector<char> bad_magic = good;
  bad_magic[0] ^= 0x55;
  const std::vector<char> short_header(good.begin(), good.begin() + 10);
  const std::vector<char>* malformed[] = {&truncated, &bad_magic, &short_header};
  for (const std::vector<char>* d : malformed)
    ASSERT_TRUE(send_datagram(*d)) << std::strerror(errno);
  EXPECT_TRUE(no_completion(p_.cq_b, std::chrono::milliseconds(200)));
  ASSERT_TRUE(send_datagram(good)) << std::strerror(errno);
  const ibv_wc wc = poll_one(p_.cq_b);
  EXPECT_TRUE(completed(wc, 10));
  EXPECT_EQ(wc.src_qp, 0xabcdefu);
  EXPECT_TRUE(inbox.all(0x5e, kGrh));
  close(fd);
}

}  // namespace
}  // namespace softrdma_test

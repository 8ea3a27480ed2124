// The TCP path between hosts under bad input: malformed or truncated messages tear the
// connection down; the process keeps running, a requester's QP goes to ERROR after its
// retry budget, and memory outside registered regions is never touched.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "support/subprocess.hpp"
#include "verbs_fixture.hpp"
#include "wire/protocol.hpp"

namespace softrdma_test {
namespace {

namespace wire = softrdma::wire;

// One port for this test program: softrdma reads SOFTRDMA_PORT once, at first use.
const int kPort = [] {
  const int p = rdmakit::testing::free_tcp_port();
  setenv("SOFTRDMA_PORT", std::to_string(p).c_str(), 1);
  return p;
}();

int connect_to(const char* ip) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(kPort));
  inet_pton(AF_INET, ip, &a.sin_addr);
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(s);
    return -1;
  }
  timeval tv{5, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return s;
}

// True when the peer closed the connection (read returns 0) rather than timing out.
bool closed_by_peer(int fd) {
  char byte;
  return recv(fd, &byte, 1, 0) == 0;
}

class TcpPathTest : public RcLoopbackTest {
 protected:
  // A QP in RTR makes this process one of the host's softrdma listeners.
  void Listen() {
    ibv_cq* cq = NewCq();
    ibv_qp* qp = NewQp(IBV_QPT_RC, cq, cq);
    ASSERT_NE(qp, nullptr);
    ASSERT_EQ(rc_to_init(qp, kRemoteAccess), 0);
    ASSERT_EQ(rc_to_rtr(qp, qp->qp_num, gid0(), RcParams{}), 0);
  }

  wire::Request valid_request(uint32_t dest_qpn) {
    wire::Request h{};
    h.magic = wire::kMagic;
    h.kind = wire::Kind::kRequest;
    h.opcode = IBV_WR_RDMA_WRITE;
    h.qp_type = IBV_QPT_RC;
    h.dest_qpn = dest_qpn;
    h.src_qpn = 0x123;
    h.length = 8;
    h.payload_len = 8;
    return h;
  }
};

TEST_F(TcpPathTest, GarbageHeaderClosesTheConnectionAndTheProcessLives) {
  ASSERT_NO_FATAL_FAILURE(Listen());
  int s = connect_to("127.0.0.1");
  ASSERT_GE(s, 0);
  std::vector<char> garbage(sizeof(wire::Request), '\x5a');
  ASSERT_EQ(send(s, garbage.data(), garbage.size(), 0), static_cast<ssize_t>(garbage.size()));
  EXPECT_TRUE(closed_by_peer(s));
  close(s);
  // The process still works: a loopback pair moves data.
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer src = NewBuffer(64, kRemoteAccess, 7), dst = NewBuffer(64);
  ASSERT_EQ(post_recv(p_.b, 1, {dst.sge()}), 0);
  ASSERT_EQ(post_send(p_.a, send_wr(2), {src.sge()}), 0);
  EXPECT_TRUE(completed(poll_one(p_.cq_a), 2));
  EXPECT_TRUE(completed(poll_one(p_.cq_b), 1));
}

TEST_F(TcpPathTest, LengthBeyondTheMaximumMessageIsRefused) {
  ASSERT_NO_FATAL_FAILURE(Listen());
  int s = connect_to("127.0.0.1");
  ASSERT_GE(s, 0);
  wire::Request h = valid_request(0x100);
  h.length = h.payload_len = uint64_t{1} << 40;  // would make the responder allocate 1 TiB
  ASSERT_EQ(send(s, &h, sizeof h, 0), static_cast<ssize_t>(sizeof h));
  EXPECT_TRUE(closed_by_peer(s));
  close(s);
}

TEST_F(TcpPathTest, TruncatedRequestIsDroppedWithoutEffect) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  Buffer target = NewBuffer(64, kRemoteAccess, 0);
  int s = connect_to("127.0.0.1");
  ASSERT_GE(s, 0);
  // A well-formed RDMA WRITE to a real QP and region, cut off in its payload.
  wire::Request h = valid_request(p_.b->qp_num);
  h.src_qpn = p_.a->qp_num;
  h.rkey = target.mr->rkey;
  h.remote_addr = reinterpret_cast<uint64_t>(target.data());
  ASSERT_EQ(send(s, &h, sizeof h, 0), static_cast<ssize_t>(sizeof h));
  ASSERT_EQ(send(s, "abc", 3, 0), 3);
  shutdown(s, SHUT_WR);
  EXPECT_TRUE(closed_by_peer(s));
  close(s);
  for (size_t i = 0; i < 64; ++i) ASSERT_EQ(target.data()[i], 0) << "byte " << i << " written";
}

TEST_F(TcpPathTest, WellFormedRequestToAMissingQpIsAnsweredNoAnswer) {
  ASSERT_NO_FATAL_FAILURE(Listen());
  int s = connect_to("127.0.0.1");
  ASSERT_GE(s, 0);
  wire::Request h = valid_request(0xfffff0);  // no such QP
  char payload[8] = {};
  ASSERT_EQ(send(s, &h, sizeof h, 0), static_cast<ssize_t>(sizeof h));
  ASSERT_EQ(send(s, payload, sizeof payload, 0), static_cast<ssize_t>(sizeof payload));
  wire::Response r{};
  ASSERT_TRUE(read_all(s, &r, sizeof r, kTimeout));
  EXPECT_EQ(r.magic, wire::kMagic);
  EXPECT_EQ(r.reply, wire::Reply::kNoAnswer);
  EXPECT_EQ(r.src_qpn, h.src_qpn);
  close(s);
}

TEST_F(TcpPathTest, MalformedResponsesFailTheRequesterAfterItsRetryBudget) {
  // A fake host at 127.0.0.2 (not one of softrdma0's GIDs, so reached over TCP) answers
  // every request with garbage.
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(listener, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(kPort));
  inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << strerror(errno);
  ASSERT_EQ(listen(listener, 8), 0);
  std::atomic<int> requests_seen{0};
  std::atomic<bool> stop{false};
  std::thread fake([&] {
    while (!stop) {
      int c = accept(listener, nullptr, nullptr);
      if (c < 0) break;
      wire::Request h{};
      if (read_all(c, &h, sizeof h, kTimeout) && h.magic == wire::kMagic &&
          h.opcode == IBV_WR_RDMA_WRITE && h.payload_len == 8) {
        ++requests_seen;
        char junk[sizeof(wire::Response)];
        std::memset(junk, 0xee, sizeof junk);
        send(c, junk, sizeof junk, MSG_NOSIGNAL);
      }
      close(c);
    }
  });

  ibv_cq* cq = NewCq();
  ibv_qp* qp = NewQp(IBV_QPT_RC, cq, cq);
  ASSERT_NE(qp, nullptr);
  ibv_gid remote{};
  remote.raw[10] = remote.raw[11] = 0xff;
  inet_pton(AF_INET, "127.0.0.2", &remote.raw[12]);
  RcParams fast;
  fast.timeout = 10;  // 4 ms
  fast.retry_cnt = 1;
  ASSERT_EQ(rc_connect(qp, 0x4242, remote, fast), 0);
  Buffer src = NewBuffer(8, kRemoteAccess, 1);
  ASSERT_EQ(post_send(qp, rdma_wr(9, IBV_WR_RDMA_WRITE, 0x1000, 0x77), {src.sge()}), 0);
  ASSERT_EQ(post_send(qp, rdma_wr(10, IBV_WR_RDMA_WRITE, 0x1000, 0x77), {src.sge()}), 0);
  const ibv_wc first = poll_one(cq);
  EXPECT_EQ(first.wr_id, 9u);
  EXPECT_EQ(first.status, IBV_WC_RETRY_EXC_ERR) << ibv_wc_status_str(first.status);
  const ibv_wc second = poll_one(cq);
  EXPECT_EQ(second.wr_id, 10u);
  EXPECT_EQ(second.status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(second.status);
  EXPECT_EQ(qp_state(qp), IBV_QPS_ERR);
  EXPECT_GE(requests_seen.load(), 1);
  stop = true;
  shutdown(listener, SHUT_RDWR);
  close(listener);
  fake.join();
}

}  // namespace
}  // namespace softrdma_test

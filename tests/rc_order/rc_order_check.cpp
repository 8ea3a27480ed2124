// Checks RC ordering end to end with many operations in flight: the client posts, for each
// i, an RDMA WRITE of i into slot i of the server's log and then a SEND_WITH_IMM carrying i.
// The server requires the sends to arrive as 0, 1, 2, ... and each one's WRITE to be in its
// log already (RC executes a QP's operations in order), and answers "ok" or where order
// broke over the TCP connection used to exchange the QPs' addresses.
//
// Usage: rc_order_check server PORT
//        rc_order_check client HOST PORT [MESSAGES]
// Exit status 0 when every message arrived in order with its data.
#include <arpa/inet.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "rc_peer/rc_peer.hpp"

namespace {

using rc_peer::Address;
using rc_peer::die;
using rc_peer::recv_all;
using rc_peer::send_all;

constexpr int kInFlight = 64;   // client: operations in flight
constexpr int kReceives = 256;  // server: receives kept posted
constexpr uint32_t kMaxMessages = 1u << 24;

rc_peer::Options options(uint32_t messages) {
  rc_peer::Options o;
  o.slots = messages;  // the server's log of values; the client's copy of what it writes
  o.send_depth = kInFlight;
  o.recv_depth = kReceives;
  // 0.5 s per try, eight tries: this checks order, not speed, and on a loaded CI machine
  // six busy-polling processes and their serving threads share two CPUs (with 67 ms per
  // try a client once gave up after its server went a second without being scheduled).
  o.ack_timeout = 17;
  return o;
}

int run_server(int port) {
  const int fd = rc_peer::tcp_server(port);
  Address peer{};
  if (!recv_all(fd, &peer, sizeof peer) || peer.count == 0 || peer.count > kMaxMessages)
    die("peer address");
  rc_peer::RcPeer v(options(peer.count));
  for (int i = 0; i < kReceives; ++i) v.post_receive(static_cast<uint64_t>(i));
  v.connect_to(peer);
  const Address mine = v.address();
  if (!send_all(fd, &mine, sizeof mine)) die("send address");
  std::string verdict = "ok";
  for (uint32_t expected = 0; expected < peer.count && verdict == "ok"; ++expected) {
    const ibv_wc wc = v.next_completion();
    const uint32_t got = ntohl(wc.imm_data);
    if (wc.opcode != IBV_WC_RECV || !(wc.wc_flags & IBV_WC_WITH_IMM) || got != expected)
      verdict = "message " + std::to_string(expected) + " arrived as " + std::to_string(got);
    else if (v.slots[expected] != expected + 1)
      verdict = "message " + std::to_string(expected) + " before its write";
    v.post_receive(wc.wr_id);
  }
  std::printf("server: %u messages: %s\n", peer.count, verdict.c_str());
  const bool ok = verdict == "ok";
  send_all(fd, &ok, sizeof ok);
  close(fd);
  return ok ? 0 : 1;
}

int run_client(const char* host, int port, uint32_t messages) {
  const int fd = rc_peer::tcp_client(host, port);
  rc_peer::RcPeer v(options(messages));
  for (uint32_t i = 0; i < messages; ++i) v.slots[i] = i + 1;
  Address mine = v.address();
  mine.count = messages;
  Address peer{};
  if (!send_all(fd, &mine, sizeof mine) || !recv_all(fd, &peer, sizeof peer))
    die("address exchange");
  v.connect_to(peer);
  int in_flight = 0;
  for (uint32_t i = 0; i < messages; ++i) {
    for (; in_flight + 2 > kInFlight; --in_flight) v.next_completion();
    ibv_sge sge{reinterpret_cast<uint64_t>(&v.slots[i]), sizeof(uint64_t), v.mr->lkey};
    ibv_send_wr write{}, message{};
    write.opcode = IBV_WR_RDMA_WRITE;
    write.sg_list = &sge;
    write.num_sge = 1;
    write.send_flags = IBV_SEND_SIGNALED;
    write.wr.rdma.remote_addr = peer.slots_addr + i * sizeof(uint64_t);
    write.wr.rdma.rkey = peer.slots_rkey;
    write.next = &message;
    message.opcode = IBV_WR_SEND_WITH_IMM;
    message.imm_data = htonl(i);
    message.send_flags = IBV_SEND_SIGNALED;
    v.post(write);
    in_flight += 2;
  }
  for (; in_flight > 0; --in_flight) v.next_completion();
  bool ok = false;
  if (!recv_all(fd, &ok, sizeof ok)) die("verdict");
  std::printf("client: %u messages: %s\n", messages, ok ? "in order" : "out of order");
  close(fd);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string role = argc > 1 ? argv[1] : "";
  if (role == "server" && argc == 3) return run_server(std::atoi(argv[2]));
  const unsigned long messages = argc == 5 ? std::strtoul(argv[4], nullptr, 10) : 20000;
  if (role == "client" && (argc == 4 || argc == 5) && messages > 0 && messages <= kMaxMessages)
    return run_client(argv[2], std::atoi(argv[3]), static_cast<uint32_t>(messages));
  std::fprintf(stderr, "usage: rc_order_check server PORT | client HOST PORT [MESSAGES]\n");
  return 2;
}

// Three parts of an attack across hosts, as tests/hostile_peers_test.cpp plays it: a victim
// QP (a verbs server), its real peer (a verbs client on another host) and a forger on a
// third host that knows both QP numbers, the victim's rkey and address and roughly where the
// PSNs stand, and speaks softrdma's wire format as any program could (its own hello, with an
// identity of random bytes). softrdma must execute none of the forger's requests and let
// none of its acknowledgements complete the client's work, while the client's own traffic
// completes with the right data.
//
// Usage: hostile_peer victim PORT
//          Serves one client; prints "victim qpn=Q rkey=K addr=A", then, once the client says
//          it is done, checks its memory and receives and prints "victim ok" and its user's
//          device counters, or what is wrong (exit 1).
//        hostile_peer client HOST PORT [PSN_OFFSET]
//          Round 1 (WRITE, READ, SEND, fetch-and-add, all checked; with PSN_OFFSET its requests
//          start that far from the PSN it told the victim, and fail as on a NIC), prints
//          "client qpn=Q next_psn=P"; on SIGUSR1 posts a WRITE and prints "write done" when
//          it completes; on SIGUSR2 a last round, then tells the victim and exits 0.
//        hostile_peer forge HOST QPN SRC_QPN RKEY ADDR PSN
//          Every PSN within 512 of PSN: a WRITE, a READ, a fetch-and-add and a SEND to QP
//          QPN at HOST claiming to come from SRC_QPN; prints "forged N executed E".
//        hostile_peer forge-ack HOST QPN SRC_QPN PSN
//          Requests to QP QPN at HOST from "SRC_QPN" that acknowledge everything up to
//          PSN + 1024; prints "forged N".
// Exit status 0 when the part did what it must; 2 on a failure to set up.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dlfcn.h>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/psn.hpp"
#include "rc_peer/rc_peer.hpp"
#include "wire/hello.hpp"
#include "wire/protocol.hpp"

namespace {

namespace wire = softrdma::wire;
namespace psn = softrdma::psn;
using rc_peer::Address;
using rc_peer::die;
using rc_peer::recv_all;
using rc_peer::send_all;

// The victim's region: what the client writes each round, what it writes while the victim
// is stopped, the word it adds to, and the receive buffers of its SENDs.
constexpr size_t kRoundBytes = 64;
constexpr size_t kStoppedAt = 64;
constexpr size_t kCounterAt = 128;
constexpr size_t kReceiveAt = 256;
constexpr size_t kRegionBytes = 4096;
constexpr int kReceives = 8;
constexpr char kRoundByte = 'C', kStoppedByte = 'D', kForgedByte = 'F';

rc_peer::Options options(uint32_t sq_psn_offset = 0) {
  rc_peer::Options o;
  o.sq_psn_offset = sq_psn_offset;
  // 1.07 s a try: the victim stays stopped for a while; a client whose PSNs do not match
  // fails after its budget (67 ms a try, eight tries).
  o.ack_timeout = sq_psn_offset ? 14 : 18;
  o.slots = kRegionBytes / sizeof(uint64_t);
  o.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
             IBV_ACCESS_REMOTE_ATOMIC;
  return o;
}

char* bytes(rc_peer::RcPeer& v) {
  return reinterpret_cast<char*>(v.slots.data());
}

ibv_sge sge(rc_peer::RcPeer& v, size_t at, size_t length) {
  return {reinterpret_cast<uint64_t>(bytes(v) + at), static_cast<uint32_t>(length), v.mr->lkey};
}

// The device counters of this user (softrdma exports them for its tests).
void print_counters() {
  using Fn = int (*)(const char*, uint64_t*);
  const auto counter = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "softrdma_counter"));
  for (const char* name : {"foreign_requests", "out_of_sequence"}) {
    uint64_t value = 0;
    if (counter && counter(name, &value) == 0)
      std::printf("counter %s=%llu\n", name, static_cast<unsigned long long>(value));
  }
}

int run_victim(int port) {
  const int fd = rc_peer::tcp_server(port);
  Address peer{};
  if (!recv_all(fd, &peer, sizeof peer)) die("peer address");
  rc_peer::RcPeer v(options());
  for (int i = 0; i < kReceives; ++i) {
    ibv_recv_wr wr{};
    ibv_sge s = sge(v, kReceiveAt + i * kRoundBytes, kRoundBytes);
    wr.wr_id = static_cast<uint64_t>(i);
    wr.sg_list = &s;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (ibv_post_recv(v.qp, &wr, &bad) != 0) die("ibv_post_recv");
  }
  v.connect_to(peer);
  const Address mine = v.address();
  if (!send_all(fd, &mine, sizeof mine)) die("send address");
  std::printf("victim qpn=%u rkey=%u addr=%llu\n", mine.qpn, mine.slots_rkey,
              static_cast<unsigned long long>(mine.slots_addr));
  print_counters();
  std::fflush(stdout);
  uint32_t rounds = 0;
  if (!recv_all(fd, &rounds, sizeof rounds)) die("the client's end");
  // Every receive is the client's, one per round; what else arrived was not.
  int received = 0;
  ibv_wc wc{};
  while (ibv_poll_cq(v.cq, 1, &wc) == 1) {
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || wc.byte_len != kRoundBytes ||
        std::memcmp(bytes(v) + kReceiveAt + wc.wr_id * kRoundBytes,
                    std::string(kRoundBytes, kRoundByte).data(), kRoundBytes) != 0) {
      std::printf("victim: a receive that is not the client's (status %d, %u bytes)\n", wc.status,
                  wc.byte_len);
      return 1;
    }
    ++received;
  }
  uint64_t counter = 0;
  std::memcpy(&counter, bytes(v) + kCounterAt, sizeof counter);
  const bool written =
      std::string(bytes(v), kRoundBytes) == std::string(kRoundBytes, kRoundByte) &&
      std::string(bytes(v) + kStoppedAt, kRoundBytes) == std::string(kRoundBytes, kStoppedByte);
  const bool forged = std::string(bytes(v), kRegionBytes).find(kForgedByte) != std::string::npos;
  print_counters();
  if (received != static_cast<int>(rounds) || counter != rounds || !written || forged) {
    std::printf("victim: %d receives, counter %llu for %u rounds, client's writes %s, %s\n",
                received, static_cast<unsigned long long>(counter), rounds,
                written ? "there" : "missing", forged ? "FORGED BYTES" : "no forged bytes");
    return 1;
  }
  std::printf("victim ok\n");
  return 0;
}

// One WRITE, READ (checked), SEND and fetch-and-add; returns the requests posted.
uint32_t round_trip(rc_peer::RcPeer& c, const Address& victim, uint64_t round) {
  std::memset(bytes(c), kRoundByte, kRoundBytes);
  std::memset(bytes(c) + kRoundBytes, 0, kRoundBytes);
  ibv_sge write = sge(c, 0, kRoundBytes), read = sge(c, kRoundBytes, kRoundBytes),
          send = sge(c, 0, kRoundBytes), add = sge(c, 2 * kRoundBytes, sizeof(uint64_t));
  ibv_send_wr wrs[4]{};
  wrs[0].opcode = IBV_WR_RDMA_WRITE;
  wrs[0].sg_list = &write;
  wrs[0].wr.rdma = {victim.slots_addr, victim.slots_rkey};
  wrs[1].opcode = IBV_WR_RDMA_READ;
  wrs[1].sg_list = &read;
  wrs[1].wr.rdma = {victim.slots_addr, victim.slots_rkey};
  wrs[2].opcode = IBV_WR_SEND;
  wrs[2].sg_list = &send;
  wrs[3].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wrs[3].sg_list = &add;
  wrs[3].wr.atomic = {victim.slots_addr + kCounterAt, 1, 0, victim.slots_rkey};
  for (int i = 0; i < 4; ++i) {
    wrs[i].wr_id = static_cast<uint64_t>(i);
    wrs[i].num_sge = 1;
    wrs[i].send_flags = IBV_SEND_SIGNALED;
    wrs[i].next = i < 3 ? &wrs[i + 1] : nullptr;
  }
  c.post(wrs[0]);
  for (int i = 0; i < 4; ++i) c.next_completion();
  uint64_t before = 0;
  std::memcpy(&before, bytes(c) + 2 * kRoundBytes, sizeof before);
  if (std::memcmp(bytes(c) + kRoundBytes, bytes(c), kRoundBytes) != 0 || before != round)
    die("round " + std::to_string(round) + ": the READ or the atomic gave wrong data", EIO);
  return 4;
}

// Waits (bounded) for one of `signals`; returns it.
int wait_for(std::initializer_list<int> signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals) sigaddset(&set, s);
  const timespec limit{rc_peer::kTimeoutSeconds, 0};
  const int s = sigtimedwait(&set, nullptr, &limit);
  if (s < 0) die("no signal from the test");
  return s;
}

int run_client(const char* host, int port, uint32_t psn_offset) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGUSR2);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  const int fd = rc_peer::tcp_client(host, port);
  rc_peer::RcPeer c(options(psn_offset));
  const Address mine = c.address();
  if (!send_all(fd, &mine, sizeof mine)) die("send address");
  Address victim{};
  if (!recv_all(fd, &victim, sizeof victim)) die("victim address");
  c.connect_to(victim);
  uint32_t requests = round_trip(c, victim, 0);
  std::printf("client qpn=%u next_psn=%u\n", mine.qpn, psn::kMask & (mine.psn + requests));
  std::fflush(stdout);
  uint32_t rounds = 1;
  for (;;) {
    if (wait_for({SIGUSR1, SIGUSR2}) == SIGUSR2) break;
    // A WRITE while the victim is stopped: only its real answer may complete it.
    std::memset(bytes(c), kStoppedByte, kRoundBytes);
    ibv_sge s = sge(c, 0, kRoundBytes);
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma = {victim.slots_addr + kStoppedAt, victim.slots_rkey};
    c.post(wr);
    std::printf("write posted\n");
    std::fflush(stdout);
    c.next_completion();
    std::printf("write done\n");
    std::fflush(stdout);
  }
  round_trip(c, victim, rounds++);
  if (!send_all(fd, &rounds, sizeof rounds)) die("tell the victim");
  char end;
  recv(fd, &end, 1, 0);  // the victim closes once it has checked
  return 0;
}

// A connection to the softrdma listener of QP `qpn` at `host`, after a hello of its own.
int forger_link(const char* host, uint32_t qpn) {
  const char* base = std::getenv("SOFTRDMA_PORT");
  const int port = (base ? std::atoi(base) : 4791) +
                   static_cast<int>((qpn - 0x100) / 16384);  // its QP number range
  const int fd = rc_peer::tcp_client(host, port);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  wire::Hello hello{};
  hello.magic = wire::kHelloMagic;
  hello.version = wire::kWireVersion;
  hello.role = wire::Role::kLink;
  hello.uid = 0;  // claims to be root: a claim is worth nothing
  std::random_device random;
  for (auto& b : hello.identity) b = static_cast<uint8_t>(random());
  wire::Hello theirs{};
  if (!send_all(fd, &hello, sizeof hello) || !recv_all(fd, &theirs, sizeof theirs)) die("hello");
  return fd;
}

wire::Request forged(uint32_t qpn, uint32_t src_qpn, uint32_t at_psn) {
  wire::Request h{};
  h.magic = wire::kMagic;
  h.kind = wire::Kind::kRequest;
  h.qp_type = IBV_QPT_RC;
  h.dest_qpn = qpn;
  h.src_qpn = src_qpn;
  h.psn = at_psn & psn::kMask;
  return h;
}

// Sends every request and its payload; reads their answers. Counts those carried out, and
// makes a new connection whenever the listener closes one (it closes a connection that has
// not proven itself after a few refused requests).
struct Forger {
  const char* host;
  uint32_t qpn;
  int fd = -1;
  int executed = 0;
  int sent = 0;

  void send(const wire::Request& h) {
    const std::string payload(h.payload_len, kForgedByte);
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (fd < 0) fd = forger_link(host, qpn);
      wire::Response r{};
      if (send_all(fd, &h, sizeof h) &&
          (payload.empty() || send_all(fd, payload.data(), payload.size())) &&
          recv_all(fd, &r, sizeof r)) {
        std::vector<char> data(r.payload_len);
        if (!data.empty() && !recv_all(fd, data.data(), data.size())) die("answer");
        if (r.reply == wire::Reply::kDone && r.status == IBV_WC_SUCCESS) ++executed;
        ++sent;
        return;
      }
      close(fd);  // closed on us: once more on a new one
      fd = -1;
    }
    ++sent;  // refused by closing twice: not carried out
  }
};

int run_forge(const char* host, uint32_t qpn, uint32_t src_qpn, uint32_t rkey, uint64_t addr,
              uint32_t center) {
  Forger f{host, qpn};
  for (uint32_t d = 0; d < 1024; ++d) {
    const uint32_t p = center - 512 + d;
    wire::Request h = forged(qpn, src_qpn, p);
    h.rkey = rkey;
    h.length = kRoundBytes;
    h.opcode = IBV_WR_RDMA_WRITE;
    h.remote_addr = addr;
    h.payload_len = kRoundBytes;
    f.send(h);
    h.opcode = IBV_WR_RDMA_READ;
    h.payload_len = 0;
    f.send(h);
    h.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    h.remote_addr = addr + kCounterAt;
    h.length = sizeof(uint64_t);
    h.compare_add = 1000;
    f.send(h);
    h.opcode = IBV_WR_SEND;
    h.length = h.payload_len = kRoundBytes;
    f.send(h);
  }
  std::printf("forged %d executed %d\n", f.sent, f.executed);
  return f.executed == 0 ? 0 : 1;
}

int run_forge_ack(const char* host, uint32_t qpn, uint32_t src_qpn, uint32_t center) {
  Forger f{host, qpn};
  for (uint32_t d = 0; d < 1024; ++d) {
    wire::Request h = forged(qpn, src_qpn, center - 512 + d);
    h.opcode = IBV_WR_RDMA_WRITE;  // to nowhere: only its acknowledgement matters
    h.acked_psn_end = psn::end_word(center + 1024);
    f.send(h);
  }
  std::printf("forged %d\n", f.sent);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string part = argc > 1 ? argv[1] : "";
  const auto u32 = [&](int i) { return static_cast<uint32_t>(std::stoul(argv[i])); };
  if (part == "victim" && argc == 3) return run_victim(std::atoi(argv[2]));
  if (part == "client" && (argc == 4 || argc == 5))
    return run_client(argv[2], std::atoi(argv[3]), argc == 5 ? u32(4) : 0);
  if (part == "forge" && argc == 8)
    return run_forge(argv[2], u32(3), u32(4), u32(5), std::stoull(argv[6]), u32(7));
  if (part == "forge-ack" && argc == 6) return run_forge_ack(argv[2], u32(3), u32(4), u32(5));
  std::fprintf(stderr, "usage: see the head of hostile_peer.cpp\n");
  return 2;
}

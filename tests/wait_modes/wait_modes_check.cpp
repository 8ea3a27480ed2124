// Ping-pongs between two hosts through each way an application waits for its peer, and
// through the changes from one to another: busy-polling the CQ, asleep in ibv_get_cq_event,
// and spinning on memory that the peer's RDMA WRITE fills (calling no verb at all). Each
// message carries its sequence number, checked on arrival, and every wait is bounded.
//
// Each side prints, per phase, the time per round trip and how often the library's threads
// (named softrdma-*) woke per round trip (voluntary context switches): while both sides
// busy-poll, their own polls take what arrives, and those threads should mostly sleep
// (wire/standby.hpp); in the other phases they serve.
//
// Usage: wait_modes_check server PORT | client HOST PORT
// Exit status 0 when every message arrived in time with its value.
#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "rc_peer/rc_peer.hpp"
#include "support/thread_usage.hpp"

namespace {

using rc_peer::Address;
using rc_peer::die;
using Clock = std::chrono::steady_clock;

enum class Wait { kPoll, kEvent, kMemory };

const char* name_of(Wait w) {
  switch (w) {
    case Wait::kPoll:
      return "poll";
    case Wait::kEvent:
      return "event";
    case Wait::kMemory:
      return "memory";
  }
  return "?";
}

struct Phase {
  Wait wait;
  uint32_t round_trips;
};

// Every change between two ways of waiting, in both directions.
constexpr Phase kPhases[] = {{Wait::kPoll, 2000},  {Wait::kEvent, 300},  {Wait::kPoll, 2000},
                             {Wait::kMemory, 300}, {Wait::kPoll, 2000},  {Wait::kMemory, 300},
                             {Wait::kEvent, 300},  {Wait::kMemory, 300}, {Wait::kPoll, 2000}};
constexpr int kReceives = 8;

// Voluntary context switches so far of this process's softrdma threads.
uint64_t library_thread_wakeups() {
  return rdmakit::testing::usage_of_threads("softrdma-")
      .value_or(rdmakit::testing::ThreadUsage{})
      .wakeups;
}

class Side {
 public:
  explicit Side(const char* role) : role_(role), peer_(options()) {
    for (int i = 0; i < kReceives; ++i) peer_.post_receive(static_cast<uint64_t>(i));
  }

  Address address() const { return peer_.address(); }
  void connect_to(const Address& a) {
    remote_ = a;
    peer_.connect_to(a);
  }

  // The client's half of round trip `seq`: ping, then wait for the pong.
  void ping(uint32_t seq, Wait how) {
    send(seq, how);
    receive(seq, how);
  }
  // The server's half.
  void pong(uint32_t seq, Wait how) {
    receive(seq, how);
    send(seq, how);
  }

  // Runs every phase, doing `half` (ping or pong) of each round trip.
  void run(void (Side::*half)(uint32_t, Wait)) {
    uint32_t seq = 0;
    for (const Phase& phase : kPhases) {
      const uint64_t wakeups_before = library_thread_wakeups();
      const auto start = Clock::now();
      for (uint32_t i = 0; i < phase.round_trips; ++i) (this->*half)(++seq, phase.wait);
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      const double wakeups =
          static_cast<double>(library_thread_wakeups() - wakeups_before) / phase.round_trips;
      std::printf("%s %s: %u round trips, %.1f us each, %.3f wake-ups of softrdma threads each\n",
                  role_, name_of(phase.wait), phase.round_trips, us / phase.round_trips, wakeups);
    }
    while (sends_in_flight_ > 0) take(Wait::kPoll);
    std::fflush(stdout);
  }

 private:
  static rc_peer::Options options() {
    rc_peer::Options o;
    o.slots = 1;  // what the peer's WRITE fills in a memory phase
    o.send_depth = 16;
    o.recv_depth = kReceives;
    o.completion_channel = true;
    return o;
  }

  // SEND_WITH_IMM of `seq`, or in a memory phase an RDMA WRITE of it into the peer's slot.
  void send(uint32_t seq, Wait how) {
    ibv_send_wr wr{};
    wr.wr_id = seq;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_sge sge{};
    if (how == Wait::kMemory) {
      value_ = seq;
      sge = {reinterpret_cast<uint64_t>(&value_), sizeof value_, 0};
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags |= IBV_SEND_INLINE;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.wr.rdma.remote_addr = remote_.slots_addr;
      wr.wr.rdma.rkey = remote_.slots_rkey;
    } else {
      wr.opcode = IBV_WR_SEND_WITH_IMM;
      wr.imm_data = htonl(seq);
    }
    peer_.post(wr);
    ++sends_in_flight_;
    // As perftest's write_lat: the WRITE's completion, then the wait on memory.
    while (how == Wait::kMemory && sends_in_flight_ > 0) take(Wait::kPoll);
  }

  // Waits for message `seq`: a receive, or in a memory phase the slot holding it.
  void receive(uint32_t seq, Wait how) {
    if (how == Wait::kMemory) {
      const auto give_up = Clock::now() + std::chrono::seconds(rc_peer::kTimeoutSeconds);
      auto* slot = reinterpret_cast<volatile uint64_t*>(peer_.slots.data());
      for (uint32_t spins = 0; *slot != seq; ++spins)
        if (spins % 4096 == 0 && Clock::now() > give_up)
          die("WRITE " + std::to_string(seq), ETIMEDOUT);
      return;
    }
    for (;;) {
      const ibv_wc wc = take(how);
      if (wc.opcode != IBV_WC_RECV) continue;
      peer_.post_receive(wc.wr_id);
      const uint32_t got = ntohl(wc.imm_data);
      if (!(wc.wc_flags & IBV_WC_WITH_IMM) || got != seq)
        die("message " + std::to_string(seq) + " arrived as " + std::to_string(got), EPROTO);
      return;
    }
  }

  // The next completion, busy-polling or asleep until the CQ's event; a send's completion
  // is counted here.
  ibv_wc take(Wait how) {
    ibv_wc wc{};
    if (how == Wait::kEvent)
      while (!take_after_event(wc)) {
      }
    else
      wc = peer_.next_completion();
    if (wc.opcode == IBV_WC_SEND || wc.opcode == IBV_WC_RDMA_WRITE) --sends_in_flight_;
    return wc;
  }

  // A completion if one is there, else one after arming the CQ (it came before the arming
  // took), else none after sleeping until the CQ's event.
  bool take_after_event(ibv_wc& wc) {
    if (ibv_poll_cq(peer_.cq, 1, &wc) == 1) return (rc_peer::check_success(wc), true);
    if (const int rc = ibv_req_notify_cq(peer_.cq, 0)) die("ibv_req_notify_cq", rc);
    if (ibv_poll_cq(peer_.cq, 1, &wc) == 1) return (rc_peer::check_success(wc), true);
    pollfd p{peer_.channel->fd, POLLIN, 0};
    if (poll(&p, 1, rc_peer::kTimeoutSeconds * 1000) != 1) die("no completion event", ETIMEDOUT);
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    if (ibv_get_cq_event(peer_.channel, &cq, &context) != 0) die("ibv_get_cq_event");
    ibv_ack_cq_events(cq, 1);
    return false;
  }

  const char* role_;
  rc_peer::RcPeer peer_;
  Address remote_{};
  uint64_t value_ = 0;  // the source of this side's WRITEs
  int sends_in_flight_ = 0;
};

int run(const char* role, int fd) {
  Side side(role);
  const Address mine = side.address();
  Address theirs{};
  if (!rc_peer::send_all(fd, &mine, sizeof mine) || !rc_peer::recv_all(fd, &theirs, sizeof theirs))
    die("address exchange");
  side.connect_to(theirs);
  // Both QPs ready before the first message.
  char ready = 1;
  if (!rc_peer::send_all(fd, &ready, 1) || !rc_peer::recv_all(fd, &ready, 1)) die("start");
  side.run(std::strcmp(role, "client") == 0 ? &Side::ping : &Side::pong);
  // Neither side leaves while the other may still need its QP.
  if (!rc_peer::send_all(fd, &ready, 1) || !rc_peer::recv_all(fd, &ready, 1)) die("finish");
  close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string role = argc > 1 ? argv[1] : "";
  if (role == "server" && argc == 3) return run("server", rc_peer::tcp_server(std::atoi(argv[2])));
  if (role == "client" && argc == 4)
    return run("client", rc_peer::tcp_client(argv[2], std::atoi(argv[3])));
  std::fprintf(stderr, "usage: wait_modes_check server PORT | client HOST PORT\n");
  return 2;
}

// One side of an RC connection for the check programs that run as two processes on two
// hosts (rc_order_check, wait_modes_check): the first device, a CQ, an RC QP and one
// registered region of 64-bit slots, connected through an exchange of addresses over TCP.
// Any failure ends the program with status 2 and says why.
#pragma once

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rc_peer {

/// How long any wait for a completion or for the peer may take.
constexpr int kTimeoutSeconds = 60;

[[noreturn]] void die(const std::string& what, int error = errno);

bool send_all(int fd, const void* p, size_t n);
bool recv_all(int fd, void* p, size_t n);
/// The one connection accepted on `port`.
int tcp_server(int port);
int tcp_client(const char* host, int port);

/// What each side tells the other.
struct Address {
  uint32_t qpn;
  uint32_t psn;  // the first of the side's requests
  uint8_t gid[16];
  uint64_t slots_addr;  // the registered slots
  uint32_t slots_rkey;
  uint32_t count;  // the program's own (rc_order_check: messages the client will send)
};

struct Options {
  size_t slots = 1;
  int send_depth = 16;
  int recv_depth = 16;
  bool completion_channel = false;  // the CQ reports events to a channel of its own
  /// Each try of an unanswered request (4.096 µs << ack_timeout), seven retries.
  uint8_t ack_timeout = 14;
  /// The rights of the region and of the QP.
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  /// How far from the PSN it told its peer this side's requests really start (tests of QPs
  /// whose PSNs do not match: 0 otherwise).
  uint32_t sq_psn_offset = 0;
};

class RcPeer {
 public:
  explicit RcPeer(const Options& options);
  RcPeer(const RcPeer&) = delete;
  RcPeer& operator=(const RcPeer&) = delete;

  Address address() const;
  /// To RTR and RTS, towards `peer`.
  void connect_to(const Address& peer);
  void post_receive(uint64_t id);
  void post(ibv_send_wr& wr);
  /// One successful completion, busy-polling.
  ibv_wc next_completion();

  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<uint64_t> slots;

 private:
  uint8_t ack_timeout_;
  uint32_t psn_;  // where this side's requests start: random, as perftest's
  uint32_t sq_psn_offset_;
};

/// Exits with status 2 unless `wc` succeeded.
void check_success(const ibv_wc& wc);

}  // namespace rc_peer

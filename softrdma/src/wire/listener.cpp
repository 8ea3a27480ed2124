#include "wire/listener.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/log.hpp"
#include "engine/responder.hpp"
#include "engine/transmit.hpp"
#include "wire/protocol.hpp"
#include "wire/socket_io.hpp"

namespace softrdma::wire {
namespace {

void accept_loop(int listener) {
  for (;;) {
    int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) continue;
      SOFTRDMA_DEBUG_LOG("accept: %s", std::strerror(errno));
      return;
    }
    std::thread(serve_connection, fd).detach();
  }
}

InboundRequest to_inbound(const Request& h, const iovec* local, int count) {
  InboundRequest r;
  r.opcode = static_cast<ibv_wr_opcode>(h.opcode);
  r.qp_type = static_cast<ibv_qp_type>(h.qp_type);
  r.src_qpn = h.src_qpn;
  std::memcpy(r.src_gid, h.src_gid, 16);
  std::memcpy(r.dst_gid, h.dst_gid, 16);
  r.solicited = h.flags & kSolicited;
  r.has_imm = h.flags & kHasImm;
  r.imm_data = h.imm_data;
  r.remote_addr = h.remote_addr;
  r.rkey = h.rkey;
  r.compare_add = h.compare_add;
  r.swap = h.swap;
  r.qkey = h.qkey;
  r.local = local;
  r.local_count = count;
  r.length = h.length;
  return r;
}

Reply to_reply(ResponderReply::Kind k) {
  switch (k) {
    case ResponderReply::Kind::kDone:
      return Reply::kDone;
    case ResponderReply::Kind::kRnr:
      return Reply::kRnr;
    default:
      return Reply::kNoAnswer;
  }
}

}  // namespace

void ensure_listening() {
  static std::mutex mutex;
  static pid_t listening_pid = 0;
  std::lock_guard lock(mutex);
  if (listening_pid == getpid()) return;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port());
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 128) != 0) {
    SOFTRDMA_DEBUG_LOG("cannot listen on port %u: %s", port(), std::strerror(errno));
    close(fd);
    return;  // tried again at the next connection set-up
  }
  listening_pid = getpid();
  std::thread(accept_loop, fd).detach();
}

void serve_connection(int fd) {
  tune_socket(fd);
  std::vector<char> payload, result;
  // RC requests of one requester QP run in order: after an RNR or a drop, later ones are
  // refused until the requester resends the one that failed (go-back-N).
  std::unordered_map<uint64_t, uint32_t> expected_psn;
  for (;;) {
    Request h;
    if (!read_all(fd, &h, sizeof h)) break;
    if (!valid(h)) {
      SOFTRDMA_DEBUG_LOG("malformed request from a peer: connection closed");
      break;
    }
    payload.resize(h.payload_len);
    if (h.payload_len && !read_all(fd, payload.data(), h.payload_len)) break;

    Response resp{};
    resp.magic = kMagic;
    resp.kind = Kind::kResponse;
    resp.src_qpn = h.src_qpn;
    resp.psn = h.psn;
    const bool rc = h.qp_type == IBV_QPT_RC;
    const uint64_t key = (uint64_t{h.src_qpn} << 32) | h.dest_qpn;
    auto expected = expected_psn.find(key);
    uint64_t result_len = 0;
    // Acknowledgements the peer's QP carries for our QP come first, as on the wire.
    if (rc && h.acked_psn_end) apply_implied_acks(h.dest_qpn, h.acked_psn_end);
    if (rc && expected != expected_psn.end() && expected->second != h.psn) {
      resp.reply = Reply::kOutOfSequence;
    } else {
      iovec local{};
      int count = 0;
      if (carries_payload(h.opcode)) {
        local = iovec{payload.data(), payload.size()};
      } else {
        result_len = h.opcode == IBV_WR_RDMA_READ ? h.length : sizeof(uint64_t);
        result.resize(result_len);
        local = iovec{result.data(), result.size()};
      }
      count = local.iov_len ? 1 : 0;
      TargetQp target;
      ResponderReply reply{ResponderReply::Kind::kNoAnswer, IBV_WC_SUCCESS, 0};
      if (resolve_local_qp(h.dest_qpn, target))
        reply = respond(target, to_inbound(h, &local, count));
      resp.reply = to_reply(reply.kind);
      resp.status = reply.status;
      resp.rnr_timer = reply.rnr_timer;
      if (rc) expected_psn[key] = reply.kind == ResponderReply::Kind::kDone ? h.psn + 1 : h.psn;
      if (rc && reply.kind == ResponderReply::Kind::kDone && target.qp)
        target.qp->peer_psn_end.store(h.psn + 1, std::memory_order_release);
      if (resp.reply != Reply::kDone || resp.status != IBV_WC_SUCCESS) result_len = 0;
    }
    resp.payload_len = result_len;
    iovec out[2] = {{&resp, sizeof resp}, {result.data(), result_len}};
    if (!write_all(fd, out, result_len ? 2 : 1)) break;
  }
  close(fd);
}

}  // namespace softrdma::wire

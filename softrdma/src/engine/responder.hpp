// The responder half of the transport: carries out one incoming request against a QP of
// this host. The requester's process runs it directly for a target on the same host (so a
// target that never calls into the library is still served, as by a NIC); the TCP receive
// path runs it for requests from other hosts.
#pragma once

#include <infiniband/verbs.h>
#include <sys/uio.h>
#include <cstdint>
#include <memory>
#include <optional>

#include "common/process_identity.hpp"
#include "engine/arena.hpp"
#include "engine/connected_peer.hpp"
#include "engine/payload_tail.hpp"
#include "engine/registry.hpp"
#include "engine/shared_layout.hpp"

namespace softrdma {

/// A QP of this host, resolved from its number.
struct TargetQp {
  std::shared_ptr<PeerArena> arena;
  QpSlot* slot = nullptr;
  uint32_t generation = 0;
  uint32_t qpn = 0;
  QpShared* qp = nullptr;

  const ProcessId& owner() const { return arena->owner(); }
  /// False once the QP was destroyed (or its owner reused the number).
  bool current() const;
};

/// Keeps a target QP from being destroyed while a request runs against it: ibv_destroy_qp
/// waits until the hold is dropped (or its process died).
class TargetHold {
 public:
  explicit TargetHold(TargetQp& t) : pins_(Registry::instance().qp_pins(*t.slot)) {
    pins_.pin();
    ok_ = t.current();  // checked once pinned: destroying it unpublishes, then drains pins
  }
  ~TargetHold() { pins_.unpin(); }
  TargetHold(const TargetHold&) = delete;
  TargetHold& operator=(const TargetHold&) = delete;
  /// The QP was still there once held.
  bool ok() const { return ok_; }

 private:
  EntryPins& pins_;
  bool ok_;
};

/// A QP in `state` takes requests (from RTR on, until ERROR or RESET).
bool accepts_requests(uint32_t state);

/// Finds QP `qpn` on this host (this network namespace). False if there is none.
bool resolve_local_qp(uint32_t qpn, TargetQp& out);

struct InboundRequest {
  ibv_wr_opcode opcode = IBV_WR_SEND;
  ibv_qp_type qp_type = IBV_QPT_RC;
  uint32_t src_qpn = 0;
  uint8_t src_gid[16] = {};
  uint8_t dst_gid[16] = {};
  bool solicited = false;
  bool has_imm = false;
  uint32_t imm_data = 0;  // network byte order
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  uint32_t qkey = 0;
  uint32_t xrc_srqn = 0;  // XRC: the SRQ that takes the request on the target
  // Payload to deliver (SEND, WRITE) or where to put the result (READ, atomics), in the
  // process running the responder.
  const iovec* local = nullptr;
  int local_count = 0;
  // The payload's rest, after `local`, when it is still in the connection (SEND, WRITE).
  PayloadTail* tail = nullptr;
  uint64_t length = 0;
  // A request from another host to a connected QP: who sent it, checked against the QP's
  // peer (engine/connected_peer.hpp). Null for a request from this host (the same user's
  // process, which reaches the QP's memory anyway) and for datagrams.
  const ConnectionPeer* from = nullptr;
};

struct ResponderReply {
  enum class Kind {
    kDone,      // answered: `status` is the requester's completion status
    kRnr,       // receiver not ready: retry after `rnr_timer`
    kNoAnswer,  // dropped (QP gone, wrong state or peer): the requester times out
  };
  Kind kind = Kind::kDone;
  ibv_wc_status status = IBV_WC_SUCCESS;
  uint8_t rnr_timer = 0;
};

ResponderReply respond(TargetQp& target, const InboundRequest& request);

/// A reliable request from another host, numbered `psn`, taken in order per target QP
/// whichever connection or process it arrives through: the next one is executed; a
/// duplicate of one executed here (resent after its answer was lost with a connection) is
/// answered again without being carried out twice (a READ reads again, an atomic's original
/// value is replayed), one further behind gets no answer; an early one (an earlier request is
/// missing) gets a sequence NAK (nullopt), and the requester resends from the missing one.
std::optional<ResponderReply> respond_in_sequence(TargetQp& target, uint32_t psn,
                                                  const InboundRequest& request);

/// A UC request from another host (`r.from` set): true if it comes from the QP's peer. UC has
/// no sequence to prove a first request by: the first from the peer's host and QP pins its
/// identity.
bool admit_unreliable_connected(QpShared& qp, const InboundRequest& r);

/// The QP expects `rq_psn` next, and has executed nothing before it (ibv_modify_qp to RTR).
void start_sequence(QpShared* qp, uint32_t rq_psn);
/// Forgets the sequence: no request is taken until the QP reaches RTR again (it was reset).
void restart_sequence(QpShared* qp);

/// Moves a QP (of any process on this host) to ERROR: its posted receives complete with
/// IBV_WC_WR_FLUSH_ERR, and `event` (if not 0) is raised in the owner's context.
void qp_enter_error(PeerArena& owner, QpShared* qp, int event);
/// qp_enter_error in two steps, for a caller that completes something in between: the state
/// (true if this call moved it to ERROR), then the flush and events, once.
bool qp_mark_error(QpShared* qp);
void qp_finish_error(PeerArena& owner, QpShared* qp, int event);

/// Completes every receive waiting in a QP's own receive queue with IBV_WC_WR_FLUSH_ERR.
void flush_receive_queue(PeerArena& owner, QpShared* qp);

}  // namespace softrdma

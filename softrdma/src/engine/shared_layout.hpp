// Layouts of the objects that live in a process's arena and that peers write into.
// Offsets (not pointers) link them, as each process maps an arena at its own address.
#pragma once

#include <infiniband/verbs.h>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/biased_lock.hpp"
#include "common/process_lock.hpp"

namespace softrdma {

/// One completion, as stored in a CQ ring.
struct CqEntry {
  uint64_t wr_id;
  uint32_t status;
  uint32_t opcode;
  uint32_t vendor_err;
  uint32_t byte_len;
  uint32_t imm_data;  // network byte order, as in ibv_wc
  uint32_t qp_num;
  uint32_t src_qp;
  uint32_t wc_flags;
  uint16_t pkey_index;
  uint16_t slid;
  uint8_t sl;
  uint8_t dlid_path_bits;
  uint16_t pad;
  uint64_t send_seq;  // send completions: retires the QP's send queue up to this WR
};
static_assert(sizeof(CqEntry) == 56);

/// A ring slot: the entry and the position it holds (plus one; 0 is "never written"). The
/// producer stores the stamp last, so the consumer learns from the one cache line it reads
/// anyway that the entry is there, without reading the producers' tail.
struct alignas(64) CqSlot {
  CqEntry entry;
  std::atomic<uint64_t> stamp;
};
static_assert(sizeof(CqSlot) == 64, "one slot per cache line: a poll moves one line per entry");

inline constexpr size_t kCacheLine = 64;

/// A CQ ring in its owner's arena. Producers (the owner's send path, peers delivering
/// receives) and the consumer (the owner's polls) each write only their own cache line, so a
/// busy ring moves one line per completion between the processes, not the whole header.
struct CqShared {
  // Set at creation (the ring also by ibv_resize_cq under producer_lock); read by everyone.
  // Where the ring is, as its distance in bytes from this header (a ring that outgrew its
  // room moved elsewhere in the arena), and the mask of a position in it. A move only
  // grows the ring, and publish_ring stores the distance before the mask while ring_now
  // loads the mask first: a reader may pair an old mask with the new ring (indices within
  // it), never a new mask with the old ring.
  std::atomic<int64_t> ring_distance;
  std::atomic<uint64_t> ring_mask;
  int32_t channel_eventfd;  // -1 without a completion channel
  uint32_t pad;
  uint64_t context_offset;  // ContextShared of the owner, for async events
  uint64_t owner_handle;    // the owner's struct ibv_cq*, for async events

  // The producers' line.
  alignas(kCacheLine) SharedBiasedLock producer_lock;
  std::atomic<uint32_t> armed;           // CqArm
  std::atomic<uint32_t> overrun;         // IBV_EVENT_CQ_ERR raised
  std::atomic<uint32_t> events_pending;  // notifications not yet taken by ibv_get_cq_event
  uint64_t tail;                         // next position to fill; guarded by producer_lock
  uint64_t head_seen;  // a head the producers read: the ring is full only if it looks full

  // The consumer's line.
  alignas(kCacheLine) std::atomic<uint64_t> head;  // next position to poll

  /// The ring: where its slots are and the mask of a position.
  struct Ring {
    CqSlot* slots;
    uint64_t mask;
  };
  Ring ring_now(std::memory_order order) {
    const uint64_t mask = ring_mask.load(order);
    const int64_t distance = ring_distance.load(std::memory_order_relaxed);
    return {reinterpret_cast<CqSlot*>(reinterpret_cast<char*>(this) + distance), mask};
  }
  /// Makes the `capacity` (a power of two) slots at `slots` the ring: the same ring or a
  /// larger one (see ring_mask).
  void publish_ring(CqSlot* slots, uint32_t capacity) {
    ring_distance.store(reinterpret_cast<char*>(slots) - reinterpret_cast<char*>(this),
                        std::memory_order_release);
    ring_mask.store(capacity - 1, std::memory_order_release);
  }
  /// Where a ring that follows the header in the same block begins.
  CqSlot* slots_after_header() { return reinterpret_cast<CqSlot*>(this + 1); }
};
static_assert(sizeof(CqShared) % alignof(CqSlot) == 0);
static_assert(offsetof(CqShared, head_seen) + sizeof(uint64_t) <=
                  offsetof(CqShared, producer_lock) + kCacheLine,
              "a producer touches one line of the header");

enum CqArm : uint32_t { kCqDisarmed = 0, kCqArmedAll = 1, kCqArmedSolicited = 2 };

struct RecvWqe {
  uint64_t wr_id;
  uint32_t num_sge;
  uint32_t pad;
  // The position it holds, plus one, stored last: a consumer learns from the WQE itself that
  // it is there. Once taken it reads kTaken | (position + 1): the poster learns from the
  // slot it is about to fill, not from the takers' line, that the slot is free again.
  std::atomic<uint64_t> stamp;
  static constexpr uint64_t kTaken = uint64_t{1} << 63;

  // num_sge entries follow.
  ibv_sge* sge() { return reinterpret_cast<ibv_sge*>(this + 1); }
};

/// A receive queue (a QP's own, or a shared receive queue). The owner posts on its line, the
/// processes delivering messages take on theirs.
struct RecvQueueShared {
  // Set at creation; read by everyone.
  uint32_t capacity;  // a power of two (recv_queue_capacity): a slot is found by a mask
  uint32_t max_sge;
  uint32_t stride;  // bytes per RecvWqe
  uint32_t is_srq;
  uint32_t pd_id;
  uint32_t pad;
  uint64_t context_offset;
  uint64_t owner_handle;  // the owner's struct ibv_srq*, for the limit event

  // The posting line: the owner's threads.
  alignas(kCacheLine) SharedBiasedLock post_lock;
  std::atomic<uint64_t> tail;  // next position to post (consumers read it for the SRQ limit)

  // The taking line: peers delivering messages, a flush.
  alignas(kCacheLine) SharedBiasedLock lock;
  uint32_t limit;              // SRQ limit, 0 = not armed; guarded by lock
  std::atomic<uint64_t> head;  // next position to take; written under lock

  // `capacity` entries of `stride` bytes follow the header.
  RecvWqe* wqe(uint64_t index) {
    return reinterpret_cast<RecvWqe*>(reinterpret_cast<char*>(this + 1) +
                                      (index & (capacity - 1)) * stride);
  }
};
static_assert(offsetof(RecvQueueShared, head) + sizeof(uint64_t) <=
                  offsetof(RecvQueueShared, lock) + kCacheLine,
              "a taker touches one line of the header");

/// QpShared::qp_type of an XRC SRQ's entry in the QP table: the number that
/// ibv_get_srq_num gives names it there, so a responder on the host finds its queue.
inline constexpr uint32_t kXrcSrqEntry = 0x1000;
static_assert(kXrcSrqEntry > IBV_QPT_DRIVER, "never an ibv_qp_type");

/// A READ or an atomic a QP executed for another host, kept so that one resent after its
/// answer was lost is answered again as the IB spec has it: the READ read again if it asks
/// for what it asked before, the atomic's original value given again, never carried out twice.
struct ReplayRecord {
  enum Kind : uint32_t { kNone = 0, kRead = 1, kAtomic = 2 };
  uint32_t psn;
  Kind kind;
  uint32_t rkey;
  uint32_t pad;
  uint64_t remote_addr;
  uint64_t length;    // a READ's
  uint64_t original;  // an atomic's
};

/// How many of a QP's latest READs and atomics can be answered again, in a slot each by PSN:
/// at least the reads and atomics a requester may have outstanding (max_qp_rd_atom, see
/// verbs/device_limits.hpp). One resent from further back is not carried out: a READ gets no
/// answer, an atomic a remote operation error.
inline constexpr uint32_t kReplaySlots = 32;

struct QpShared {
  std::atomic<uint32_t> state;  // enum ibv_qp_state
  std::atomic<uint32_t> access_flags;
  uint32_t qp_type;  // enum ibv_qp_type, or kXrcSrqEntry
  uint32_t qpn;
  uint32_t pd_id;
  uint32_t qkey;
  uint32_t dest_qpn;
  uint8_t min_rnr_timer;
  uint8_t port_num;
  uint16_t pad;
  uint8_t dest_gid[16];
  uint64_t recv_queue_offset;  // the QP's RQ, or the SRQ it uses
  uint64_t recv_cq_offset;
  uint64_t context_offset;
  uint64_t owner_handle;  // the owner's struct ibv_qp*, for async events
  uint32_t uses_srq;
  // TCP transport: one past the last PSN of the peer's requests this QP executed, so the
  // QP's own requests can carry the acknowledgement (see wire::Request::acked_psn_end).
  std::atomic<uint32_t> peer_psn_end;
  // XRC_RECV QPs and XRC SRQs: their XRC domain; a request goes only into an SRQ of its
  // target QP's domain.
  uint64_t xrcd_id;
  // TCP transport, reliable QPs: the PSN of the next request to execute, from the rq_psn of
  // RTR on. It is the QP's, not a connection's, so a request resent on a new connection
  // (which may land in another process of this host) is taken as the next one, a duplicate or
  // an early one. Only the `executed_behind` PSNs before it were carried out here: one
  // further back is no duplicate (the requester's sequence is not ours). `responder_lock`
  // makes checking, executing and advancing it one step for whichever process executes.
  ProcessLock responder_lock;
  uint32_t expected_psn_known;
  uint32_t expected_psn;
  uint32_t executed_behind;
  // TCP transport, connected QPs: the identity of the peer's user (wire/hello.hpp), pinned by
  // the first request from the peer's host and QP that proved itself by its PSN
  // (engine/connected_peer.hpp); a request presenting another is refused.
  std::atomic<uint32_t> peer_identity_known;
  std::atomic<uint64_t> peer_identity[2];
  // TCP transport, RC: the largest peer_psn_end the QP's own requests carried so far. A bare
  // ACK the responder holds back (wire/held_acks.hpp) is dropped once this covers it.
  std::atomic<uint32_t> acked_psn_sent;
  // TCP transport, UD: the acknowledgement of the last datagram this QP took, which its own
  // datagrams to that datagram's requester carry (wire/datagram_acks.hpp; 0: none).
  std::atomic<uint64_t> datagram_peer_ack;
  ReplayRecord replay[kReplaySlots];
};

struct AsyncEntry {
  uint32_t event_type;  // enum ibv_event_type
  uint32_t pad;
  uint64_t handle;  // owner's object pointer (or port number for port events)
};

/// Per-context state that peers reach: the async event ring.
struct ContextShared {
  static constexpr uint32_t kAsyncCapacity = 256;
  ProcessLock lock;
  int32_t async_eventfd;
  uint64_t head;
  uint64_t tail;
  AsyncEntry ring[kAsyncCapacity];
};

}  // namespace softrdma

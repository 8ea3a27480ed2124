// The verbs objects softrdma hands out. Each embeds the public struct the application sees
// as its first member, so the application's pointer converts back to ours.
#pragma once

#include <infiniband/verbs.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <vector>

#include "common/biased_lock.hpp"
#include "common/object_pool.hpp"
#include "common/process_lock.hpp"
#include "common/recycled_nodes.hpp"
#include "engine/arena.hpp"
#include "engine/inline_bytes.hpp"
#include "engine/local_key_cache.hpp"
#include "engine/memory_access.hpp"
#include "engine/memory_windows.hpp"
#include "engine/progress.hpp"
#include "engine/region_cache.hpp"
#include "engine/registry.hpp"
#include "engine/responder.hpp"
#include "engine/sge_list.hpp"
#include "engine/shared_layout.hpp"
#include "verbs/gid_table.hpp"
#include "wire/hello.hpp"

namespace softrdma::wire {
class Link;
}

namespace softrdma {

/// rdma-core's struct verbs_device starts with ibv_device followed by its ops pointer; the
/// system libmlx5 inspects that pointer to recognise its own devices, so we keep it null.
struct Device {
  ibv_device device;
  const void* provider_ops = nullptr;
};

struct Context {
  verbs_context vctx;  // first: the application's ibv_context is vctx.context
  Device* device = nullptr;
  uint64_t shared_offset = 0;
  ContextShared* shared = nullptr;
  GidTable gids;
};
static_assert(offsetof(Context, vctx) == 0);

struct Td {
  ibv_td td;
  std::atomic<uint32_t> users{0};  // parent domains built on it
};

struct Pd {
  ibv_pd pd;
  uint32_t id;
  std::atomic<uint32_t> users{0};  // MRs, MWs, QPs, SRQs, AHs, CQs and parent domains on it
  Pd* protection = nullptr;        // a parent domain: the PD it stands for (id is that PD's)
  Td* td = nullptr;                // a parent domain's thread domain, if any
};

struct Mr {
  ibv_mr mr;
  uint64_t iova;  // the address peers use for mr.addr
  uint32_t access;
  Pd* owner_pd;
  bool moved_pages = false;  // share_pages() moved its range: unshare when it goes
};

struct Channel;

struct Cq : Pooled<Cq> {
  union {  // ibv_cq_ex begins with the fields of ibv_cq
    ibv_cq_ex cq_ex{};
    ibv_cq cq;
  };
  uint64_t offset = 0;
  // The ring follows the header in its block until ibv_resize_cq outgrows that room; then it
  // moves to a block of its own. Rings left behind are freed with the CQ: a poll in another
  // thread may still be reading one.
  uint32_t ring_room = 0;             // slots in the current ring's block
  std::vector<uint64_t> moved_rings;  // the blocks of rings that moved, the current one last
  CqShared* shared = nullptr;
  Channel* channel = nullptr;
  std::atomic<uint32_t> users{0};  // QPs and SRQs that complete into this CQ
  Pd* parent_domain = nullptr;     // ibv_create_cq_ex with IBV_CQ_INIT_ATTR_MASK_PD
  uint32_t events_delivered = 0;   // by ibv_get_cq_event; guarded by cq.mutex
  ibv_wc polled{};       // the completion ibv_start_poll / ibv_next_poll stand on (ibv_wc_read_*)
  BiasedLock poll_lock;  // one poll at a time; biased to the thread that polls
};

struct Channel : Pooled<Channel> {
  ibv_comp_channel channel;
  std::mutex mutex;
  std::vector<Cq*> cqs;
};

/// An XRC domain. Processes that open one through the same file share it: its identity is
/// the file's (verbs/xrc_domain.cpp).
struct Xrcd {
  ibv_xrcd xrcd;
  uint64_t id = 0;
  int share_fd = -1;               // a domain of a file: this process's hold on it
  std::atomic<uint32_t> users{0};  // XRC SRQs and XRC_RECV QPs in it
};

struct Srq {
  ibv_srq srq;
  uint64_t offset = 0;
  RecvQueueShared* shared = nullptr;
  uint32_t max_wr = 0;
  uint32_t max_sge = 0;
  std::atomic<uint32_t> users{0};
  // XRC SRQ: its domain, its completion queue, and its entry in the host's QP table, whose
  // number is the SRQ number (ibv_get_srq_num).
  Xrcd* xrcd = nullptr;
  Cq* cq = nullptr;
  uint64_t entry_offset = 0;
  uint32_t srq_num = 0;
};

struct Ah {
  ibv_ah ah;
  ibv_ah_attr attr;
  Gid dgid;
};

/// A send work request as the requester keeps it while it cannot complete yet.
struct SendWork {
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  uint32_t send_flags = 0;
  uint32_t imm_data = 0;
  SgeList sges;
  InlineBytes inline_data;  // IBV_SEND_INLINE: the bytes, copied at post time
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  WindowBind bind;  // IBV_WR_BIND_MW (rkey: the key a LOCAL_INV or SEND_WITH_INV invalidates)
  // UD destination
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  Gid dgid{};
  uint32_t xrc_srqn = 0;  // XRC_SEND: the SRQ on the target that takes it
  uint64_t seq = 0;       // position in the send queue, for retirement
  // Retry state of the transport
  uint32_t rnr_attempts = 0;
  std::chrono::steady_clock::time_point next_attempt{};
  std::chrono::steady_clock::time_point give_up{};  // set while the peer does not answer
  // TCP transport: what the link had moved when the ACK timer was last extended (see
  // expire_inflight); unset until the first expiry.
  std::optional<uint64_t> link_progress;
  // TCP transport: position in the QP's request stream, and the connection it went out on.
  uint32_t psn = 0;
  bool has_psn = false;
  bool answered = false;      // unreliable QPs: its answer came before an earlier request's
  uint8_t resends = 0;        // unreliable QPs: sent again because its connection broke
  uint8_t sequence_naks = 0;  // reliable QPs: sequence NAKs it was answered with
  bool refused = false;       // reliable QPs: the responder did not take it (kNoAnswer)
  std::shared_ptr<wire::Link> link;
};

/// Work requests a QP holds in order. A list takes no memory until its first entry (a QP
/// whose peer is on this host never holds any), where a deque takes a block at once; and a
/// SendWork is too large for a deque to keep more than one per block anyway. Its nodes are
/// recycled per thread (common/recycled_nodes.hpp).
using SendQueue = std::list<SendWork, RecycledNodes<SendWork>>;

/// Work requests of the extended send API between ibv_wr_start and ibv_wr_complete, built
/// field by field (verbs/qp_ex_send.cpp) and posted together or not at all.
struct WrBatch {
  struct Entry {
    ibv_send_wr wr{};
    std::vector<ibv_sge> sges;
    std::vector<char> inline_bytes;  // IBV_SEND_INLINE data, copied when it is set
  };
  std::vector<Entry> entries;
  bool started = false;
  int error = 0;  // the first misuse seen since ibv_wr_start; ibv_wr_complete returns it
};

struct Qp : Pooled<Qp> {
  ibv_qp_ex qpx;  // first: ibv_qp* and ibv_qp_ex* both point here
  Context* ctx = nullptr;
  uint64_t offset = 0;
  QpShared* shared = nullptr;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;
  RecvQueueShared* rq = nullptr;  // own receive queue (null with an SRQ)
  uint64_t rq_offset = 0;
  ibv_qp_cap cap{};
  bool sq_sig_all = false;
  uint32_t pd_id = 0;
  Xrcd* xrcd = nullptr;  // XRC_RECV: its domain (it has no PD, CQs or queues of its own)

  // Attributes kept for ibv_query_qp and the transport.
  std::mutex attr_mutex;
  ibv_qp_attr attr{};

  // Requester state. Taken on every post: biased to the thread that posts (most often the
  // only one), which then takes it without a locked instruction.
  BiasedLock sq_mutex;
  uint64_t next_seq = 0;                 // sequence number of the next posted WR
  std::atomic<uint64_t> retired_seq{0};  // WRs below this have been retired by poll_cq
  SendQueue blocked;                     // WRs waiting for the peer (RNR, no answer)
  SendQueue inflight;                    // TCP: sent, answer not yet received
  uint32_t next_psn = 0;
  // RC over TCP: the peer's requests acknowledged ours below this PSN (once known). A READ or
  // atomic waits for its answer's data, and what it covered behind one completes after it.
  uint32_t implied_acked_end = 0;
  bool implied_acks_known = false;
  // RC and UD over TCP: a peer's requests carried an acknowledgement to this process since
  // the QP's last request (wire::kTakesCarriedAcks).
  bool took_carried_ack = false;
  ProgressEntry progress;  // when its deferred work is due (engine/progress.hpp)
  // TCP: the link its requests went out on last and where it leads, so that the next request
  // to the same host and port (every request of a connected QP) skips the process-wide lookup.
  struct LastLink {
    std::shared_ptr<wire::Link> link;
    uint32_t src_ipv4_be = 0;
    uint32_t ipv4_be = 0;
    uint16_t port = 0;
    pid_t pid = 0;  // a forked child does not share its parent's connections
  } last_link;
  // TCP, connected QPs: the identity of the listener that served the peer's host and port
  // first (wire/hello.hpp), pinned until the QP is connected anew: a listener there that
  // presents another is not the peer's (another user took the port), and is not used.
  std::optional<wire::Identity> responder_identity;
  // UD over TCP: where its last datagram went; a datagram from there that carries an
  // acknowledgement (wire/datagram_acks.hpp) shows that acknowledgements reach this QP.
  Gid last_datagram_gid{};
  uint32_t last_datagram_qpn = 0;
  TargetQp peer;                          // RC: the connected QP, resolved on first use
  DirectAccess* direct_access = nullptr;  // where its same-host accesses are announced
  RegionCache region_cache;               // the peer's regions its one-sided requests used lately
  LocalKeyCache local_keys;               // the local region its direct requests used last
  bool peer_on_this_host = true;          // RC: decided at RTR from the destination GID
  // Created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: the ibv_wr_* API and its pending batch.
  std::unique_ptr<WrBatch> wr_batch;
  std::vector<Gid> mcast_groups;  // UD: the groups it is attached to (verbs/mcast.cpp)
};

inline Context* to_ctx(ibv_context* c) {
  return reinterpret_cast<Context*>(verbs_get_ctx(c));
}
inline Pd* to_pd(ibv_pd* p) {
  return reinterpret_cast<Pd*>(p);
}
inline Td* to_td(ibv_td* t) {
  return reinterpret_cast<Td*>(t);
}
inline Mr* to_mr(ibv_mr* m) {
  return reinterpret_cast<Mr*>(m);
}
inline Cq* to_cq(ibv_cq* c) {
  return reinterpret_cast<Cq*>(c);
}
inline Channel* to_channel(ibv_comp_channel* c) {
  return reinterpret_cast<Channel*>(c);
}
inline Xrcd* to_xrcd(ibv_xrcd* x) {
  return reinterpret_cast<Xrcd*>(x);
}
inline Srq* to_srq(ibv_srq* s) {
  return reinterpret_cast<Srq*>(s);
}
inline Ah* to_ah(ibv_ah* a) {
  return reinterpret_cast<Ah*>(a);
}
/// Detaches a QP that goes from every multicast group it joined.
void detach_all_groups(Qp& q);

inline Qp* to_qp(ibv_qp* q) {
  return reinterpret_cast<Qp*>(q);
}

// The conversions above rely on it (the pool's empty base takes no room). Qp is not
// standard-layout, where offsetof is GCC's extension: it computes it all the same.
static_assert(offsetof(Cq, cq) == 0 && offsetof(Channel, channel) == 0);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
static_assert(offsetof(Qp, qpx) == 0);
#pragma GCC diagnostic pop

/// A completion-channel or async-event fd: an eventfd counting one per event.
int eventfd_for_channel();

/// This process's view of its own arena as a peer (for pushing into its own queues).
PeerArena& self_peer();

/// Local QPs by number, for send-queue retirement in poll_cq and for the helper threads.
/// Clearing an entry (ibv_destroy_qp) waits until no helper uses the QP any more.
void local_qp_set(uint32_t qpn, Qp* qp);
Qp* local_qp(uint32_t qpn);
/// Held shared while a helper thread uses a local QP, exclusively to take one out.
std::shared_mutex& local_qp_mutex();
/// Calls `fn` with the local QP `qpn`, if there is one; it cannot be destroyed meanwhile.
template <typename Fn>
void with_local_qp(uint32_t qpn, Fn fn) {
  std::shared_lock using_qp(local_qp_mutex());
  if (Qp* qp = local_qp(qpn)) fn(*qp);
}
/// Calls `fn` for every QP of this process (slow: for rare events such as a lost link).
template <typename Fn>
void for_each_local_qp(Fn fn) {
  std::shared_lock using_qps(local_qp_mutex());
  const Registry& registry = Registry::instance();
  for (uint32_t i = 0; i < Registry::kQpCapacity; ++i)
    if (Qp* qp = local_qp(registry.qpn_at(i))) fn(*qp);
}

}  // namespace softrdma

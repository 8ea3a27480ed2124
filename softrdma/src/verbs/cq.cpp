// Completion queues: create, resize, destroy, poll and arm.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "common/export.hpp"
#include "engine/completion_queue.hpp"
#include "engine/progress.hpp"
#include "verbs/device_limits.hpp"
#include "verbs/objects.hpp"
#include "verbs/ops.hpp"
#include "wire/application_looks.hpp"
#include "wire/arrivals.hpp"
#include "wire/listener.hpp"
#include "wire/standby.hpp"

using namespace softrdma;

namespace {

// A ring entry begins with an ibv_wc's fields, in its layout: polling copies them whole.
#define SOFTRDMA_SAME_PLACE(field)                                     \
  static_assert(offsetof(CqEntry, field) == offsetof(ibv_wc, field) && \
                sizeof(CqEntry::field) == sizeof(ibv_wc::field))
SOFTRDMA_SAME_PLACE(wr_id);
SOFTRDMA_SAME_PLACE(status);
SOFTRDMA_SAME_PLACE(opcode);
SOFTRDMA_SAME_PLACE(vendor_err);
SOFTRDMA_SAME_PLACE(byte_len);
SOFTRDMA_SAME_PLACE(imm_data);
SOFTRDMA_SAME_PLACE(qp_num);
SOFTRDMA_SAME_PLACE(src_qp);
SOFTRDMA_SAME_PLACE(wc_flags);
SOFTRDMA_SAME_PLACE(pkey_index);
SOFTRDMA_SAME_PLACE(slid);
SOFTRDMA_SAME_PLACE(sl);
SOFTRDMA_SAME_PLACE(dlid_path_bits);
#undef SOFTRDMA_SAME_PLACE
static_assert(sizeof(ibv_wc) <= offsetof(CqEntry, send_seq));

void to_wc(const CqEntry& e, ibv_wc& wc) {
  std::memcpy(&wc, &e, sizeof wc);
}

// Takes up to `num_entries` completions into `wc`, retiring the send queues they complete:
// once the head has passed an entry, so that a requester given room by the retirement finds
// the entry's slot free for its next completion.
[[gnu::always_inline]] inline int take_completions(CqShared* shared, int num_entries, ibv_wc* wc) {
  uint64_t send_seq = 0;
  return cq_take(
      shared, num_entries,
      [&](int i, const CqEntry& e) {
        to_wc(e, wc[i]);
        send_seq = e.send_seq;
      },
      [&](int i) {
        // Retires this WR and every unsignalled one before it.
        if (send_seq == 0) return;
        if (Qp* qp = local_qp(wc[i].qp_num))
          qp->retired_seq.store(send_seq, std::memory_order_release);
      });
}

// A poll in a process with sockets to other hosts (wire/arrivals.hpp), out of line: the
// same-host poll stays short. Answers to this process's requests are taken here (on one
// poll in a few of each thread) instead of by the link's reader thread woken for them; they
// may complete something on this CQ. The poll then executes the requests other hosts sent
// this process's QPs, rather than leave them to the serving thread (a thread switch), and if
// it had found no completion, looks again: a SEND it may be waiting for has landed.
[[gnu::noinline]] int poll_with_arrivals(Cq* c, int num_entries, ibv_wc* wc) {
  const wire::Arrivals arrived = wire::look_at_sockets();
  BiasedLock::Guard one_poll_at_a_time(c->poll_lock);
  const int taken = take_completions(c->shared, num_entries, wc);
  if (!wire::serve_arrived_requests(arrived) || taken != 0) return taken;
  return take_completions(c->shared, num_entries, wc);
}

}  // namespace

namespace softrdma {

int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  if (num_entries < 0) return -EINVAL;
  run_due_progress();
  Cq* c = to_cq(cq);
  if (wire::watched_for_polls.load(std::memory_order_relaxed) != 0) [[unlikely]]
    return poll_with_arrivals(c, num_entries, wc);
  BiasedLock::Guard one_poll_at_a_time(c->poll_lock);
  return take_completions(c->shared, num_entries, wc);
}

int req_notify_cq(ibv_cq* cq, int solicited_only) {
  // The application will sleep until an event: what arrives from other hosts must wake the
  // threads that serve it again, and its due work is the helper's.
  wire::Standby::wake_all();
  progress_application_may_sleep();
  // An RMW, paired with the one in cq_push (see there).
  to_cq(cq)->shared->armed.exchange(solicited_only ? kCqArmedSolicited : kCqArmedAll,
                                    std::memory_order_acq_rel);
  return 0;
}

}  // namespace softrdma

SOFTRDMA_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  auto* ch = new (std::nothrow) Channel();
  if (!ch) {
    errno = ENOMEM;
    return nullptr;
  }
  ch->channel.context = context;
  ch->channel.fd = eventfd_for_channel();
  if (ch->channel.fd < 0) {
    delete ch;
    return nullptr;
  }
  return &ch->channel;
}

SOFTRDMA_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  Channel* ch = to_channel(channel);
  {
    std::lock_guard lock(ch->mutex);
    if (!ch->cqs.empty()) return EBUSY;
  }
  close(channel->fd);
  delete ch;
  return 0;
}

namespace {

Cq* create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
              int comp_vector) {
  if (cqe < 1 || cqe > limits::kMaxCqe || comp_vector < 0 ||
      comp_vector >= context->num_comp_vectors) {
    errno = EINVAL;
    return nullptr;
  }
  Arena& arena = Arena::self();
  const uint32_t capacity = std::bit_ceil(static_cast<uint32_t>(cqe));
  const uint64_t off = arena.allocate(cq_shared_bytes(capacity));
  auto* cq = off ? new (std::nothrow) Cq() : nullptr;
  if (!cq) {
    if (off) arena.free(off);
    errno = ENOMEM;
    return nullptr;
  }
  cq->offset = off;
  cq->ring_room = capacity;
  cq->shared = arena.at<CqShared>(off);
  cq->shared->publish_ring(cq->shared->slots_after_header(), capacity);
  cq->shared->channel_eventfd = channel ? channel->fd : -1;
  cq->shared->context_offset = to_ctx(context)->shared_offset;
  cq->shared->owner_handle = reinterpret_cast<uint64_t>(&cq->cq);
  cq->cq.context = context;
  cq->cq.channel = channel;
  cq->cq.cq_context = cq_context;
  cq->cq.handle = static_cast<uint32_t>(off / Arena::kAlign);
  cq->cq.cqe = static_cast<int>(capacity);
  pthread_mutex_init(&cq->cq.mutex, nullptr);
  pthread_cond_init(&cq->cq.cond, nullptr);
  if (channel) {
    cq->channel = to_channel(channel);
    std::lock_guard lock(cq->channel->mutex);
    cq->channel->cqs.push_back(cq);
    ++channel->refcnt;
  }
  return cq;
}

}  // namespace

namespace softrdma {

ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  constexpr uint32_t kSupportedMask = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
  // A hint only: every CQ of softrdma is safe to use from several threads.
  constexpr uint32_t kSupportedFlags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
  if ((attr->wc_flags & ~kSupportedWcFlags) || (attr->comp_mask & ~kSupportedMask) ||
      ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (attr->flags & ~kSupportedFlags))) {
    errno = EOPNOTSUPP;  // completion timestamps, VLAN and flow tags, overrun ignoring
    return nullptr;
  }
  // The PD a CQ may name is a parent domain (as on mlx5): a plain PD is EINVAL.
  Pd* parent = (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) ? to_pd(attr->parent_domain) : nullptr;
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) && (!parent || !parent->protection)) {
    errno = EINVAL;
    return nullptr;
  }
  Cq* cq = create_cq(context, static_cast<int>(std::min<uint32_t>(attr->cqe, INT32_MAX)),
                     attr->cq_context, attr->channel, static_cast<int>(attr->comp_vector));
  if (!cq) return nullptr;
  if (parent) {
    cq->parent_domain = parent;
    parent->users.fetch_add(1);
  }
  install_cq_ex_ops(*cq);
  return &cq->cq_ex;
}

}  // namespace softrdma

SOFTRDMA_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context,
                                      ibv_comp_channel* channel, int comp_vector) {
  Cq* cq = create_cq(context, cqe, cq_context, channel, comp_vector);
  return cq ? &cq->cq : nullptr;
}

SOFTRDMA_EXPORT int ibv_resize_cq(ibv_cq* cq, int cqe) {
  if (cqe < 1 || cqe > limits::kMaxCqe) return EINVAL;
  Cq* c = to_cq(cq);
  const uint32_t capacity = std::bit_ceil(static_cast<uint32_t>(cqe));
  // Past its room the ring moves to a block of its own; within it, it is relaid in place.
  Arena& arena = Arena::self();
  const bool moves = capacity > c->ring_room;
  const uint64_t moved_to = moves ? arena.allocate(size_t{capacity} * sizeof(CqSlot)) : 0;
  if (moves && !moved_to) return ENOMEM;
  bool relaid;
  {
    SharedBiasedLock::Guard guard(c->shared->producer_lock);
    CqSlot* into =
        moves ? arena.at<CqSlot>(moved_to) : c->shared->ring_now(std::memory_order_relaxed).slots;
    relaid = cq_relay(c->shared, capacity, into);
  }
  if (!relaid) {
    if (moves) arena.free(moved_to);
    return EINVAL;
  }
  if (moves) {
    c->moved_rings.push_back(moved_to);
    c->ring_room = capacity;
  }
  cq->cqe = static_cast<int>(capacity);
  return 0;
}

SOFTRDMA_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
  Cq* c = to_cq(cq);
  if (c->users.load() != 0) return EBUSY;
  // As in rdma-core: wait until every event taken from the channel has been acknowledged.
  pthread_mutex_lock(&cq->mutex);
  while (cq->comp_events_completed != c->events_delivered) pthread_cond_wait(&cq->cond, &cq->mutex);
  pthread_mutex_unlock(&cq->mutex);
  if (c->channel) {
    std::lock_guard lock(c->channel->mutex);
    std::erase(c->channel->cqs, c);
    --c->channel->channel.refcnt;
  }
  if (c->parent_domain) c->parent_domain->users.fetch_sub(1);
  Arena& arena = Arena::self();
  for (uint64_t ring : c->moved_rings) arena.free(ring);
  arena.free(c->offset);
  delete c;
  return 0;
}

SOFTRDMA_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  Channel* ch = to_channel(channel);
  for (;;) {
    uint64_t count;
    if (read(channel->fd, &count, sizeof count) != sizeof count) return -1;
    std::lock_guard lock(ch->mutex);
    for (Cq* c : ch->cqs) {
      uint32_t pending = c->shared->events_pending.load(std::memory_order_acquire);
      while (pending && !c->shared->events_pending.compare_exchange_weak(pending, pending - 1)) {
      }
      if (!pending) continue;
      pthread_mutex_lock(&c->cq.mutex);
      ++c->events_delivered;
      pthread_mutex_unlock(&c->cq.mutex);
      *cq = &c->cq;
      *cq_context = c->cq.cq_context;
      return 0;
    }
    // The event belonged to a CQ destroyed meanwhile: wait for the next one.
  }
}

SOFTRDMA_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

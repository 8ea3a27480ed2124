#include "verbs/objects.hpp"

#include <sys/eventfd.h>

#include "engine/registry.hpp"

namespace softrdma {
namespace {
std::atomic<Qp*> g_local_qps[Registry::kQpCapacity];
// The first QP number of this process's range, once it has a QP (before that every entry
// is null anyway): local_qp runs per polled send completion, without the registry.
std::atomic<uint32_t> g_first_qpn{0};
}  // namespace

int eventfd_for_channel() {
  return eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
}

PeerArena& self_peer() {
  // Cached for the process (a thread_local in a shared library costs a __tls_get_addr per
  // call); a forked child, whose identity differs, maps its own arena, before it has threads.
  static std::atomic<PeerArena*> cached{nullptr};
  PeerArena* peer = cached.load(std::memory_order_acquire);
  if (peer && peer->owner() == self_process()) return *peer;
  static auto& mutex = *new std::mutex;  // never destroyed: helper threads may outlive exit()
  static auto& kept = *new std::shared_ptr<PeerArena>;
  std::lock_guard lock(mutex);
  peer = cached.load(std::memory_order_acquire);
  if (!peer || !(peer->owner() == self_process())) {
    kept = map_peer_arena(self_process(), Arena::self().fd());
    peer = kept.get();
    cached.store(peer, std::memory_order_release);
  }
  return *peer;
}

std::shared_mutex& local_qp_mutex() {
  static auto* in_use = new std::shared_mutex;  // never destroyed: helpers may outlive exit()
  return *in_use;
}

void local_qp_set(uint32_t qpn, Qp* qp) {
  // A helper that already read this entry finishes with the QP before it can be destroyed.
  std::unique_lock taking_out(local_qp_mutex(), std::defer_lock);
  if (qp == nullptr) taking_out.lock();
  const uint32_t first = Registry::instance().qpn_at(0);
  g_first_qpn.store(first, std::memory_order_relaxed);
  g_local_qps[qpn - first].store(qp, std::memory_order_release);
}

Qp* local_qp(uint32_t qpn) {
  const uint32_t index = qpn - g_first_qpn.load(std::memory_order_relaxed);
  return index < Registry::kQpCapacity ? g_local_qps[index].load(std::memory_order_acquire)
                                       : nullptr;
}

}  // namespace softrdma

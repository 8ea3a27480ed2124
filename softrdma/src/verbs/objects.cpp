#include "verbs/objects.hpp"

#include <sys/eventfd.h>

#include "engine/registry.hpp"

namespace softrdma {
namespace {
std::atomic<Qp*> g_local_qps[Registry::kQpCapacity];
}  // namespace

int eventfd_for_channel() {
  return eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
}

PeerArena& self_peer() {
  // Re-resolved per call: a forked child has a new identity and arena.
  static thread_local std::shared_ptr<PeerArena> cached;
  if (!cached || !(cached->owner() == self_process()))
    cached = map_peer_arena(self_process(), Arena::self().fd());
  return *cached;
}

std::mutex& local_qp_walk_mutex() {
  static auto* walking = new std::mutex;  // never destroyed: helper threads may outlive exit()
  return *walking;
}

void local_qp_set(uint32_t qpn, Qp* qp) {
  // A walk that already read this entry finishes with the QP before it can be destroyed.
  std::unique_lock walking(local_qp_walk_mutex(), std::defer_lock);
  if (qp == nullptr) walking.lock();
  g_local_qps[qpn - Registry::kFirstQpn].store(qp, std::memory_order_release);
}

Qp* local_qp(uint32_t qpn) {
  if (qpn < Registry::kFirstQpn || qpn >= Registry::kFirstQpn + Registry::kQpCapacity)
    return nullptr;
  return g_local_qps[qpn - Registry::kFirstQpn].load(std::memory_order_acquire);
}

}  // namespace softrdma

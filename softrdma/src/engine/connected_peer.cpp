#include "engine/connected_peer.hpp"

#include <cstring>

namespace softrdma {
namespace {

void identity_words(const wire::Identity& identity, uint64_t words[2]) {
  std::memcpy(words, identity.data(), 2 * sizeof(uint64_t));
}
static_assert(sizeof(wire::Identity) == 2 * sizeof(uint64_t));

}  // namespace

PeerCheck check_peer(const QpShared& qp, const ConnectionPeer& from, uint32_t src_qpn) {
  if (qp.dest_qpn != src_qpn || std::memcmp(qp.dest_gid, from.gid, sizeof from.gid) != 0)
    return PeerCheck::kForeign;
  if (!qp.peer_identity_known.load(std::memory_order_acquire)) return PeerCheck::kFirstProof;
  uint64_t words[2];
  identity_words(from.identity, words);
  const bool same = qp.peer_identity[0].load(std::memory_order_relaxed) == words[0] &&
                    qp.peer_identity[1].load(std::memory_order_relaxed) == words[1];
  return same ? PeerCheck::kPeer : PeerCheck::kForeign;
}

void pin_peer(QpShared& qp, const ConnectionPeer& from) {
  uint64_t words[2];
  identity_words(from.identity, words);
  qp.peer_identity[0].store(words[0], std::memory_order_relaxed);
  qp.peer_identity[1].store(words[1], std::memory_order_relaxed);
  qp.peer_identity_known.store(1, std::memory_order_release);
}

void unpin_peer(QpShared& qp) {
  qp.peer_identity_known.store(0, std::memory_order_release);
}

}  // namespace softrdma

// Peers that cause many remote access errors (bad rkeys, ranges or rights: what guessing
// keys looks like) are refused for a while: a peer (a host and the identity its links
// present) that caused kMostAccessErrors within kWindow is refused for kRefusedFor; its
// connections are closed and new ones refused at their hello. Per serving process; the
// callers hold the serving loop's lock (every inbound connection is served under it).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "engine/connected_peer.hpp"

namespace softrdma::wire {

class PeerPenalties {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr uint32_t kMostAccessErrors = 64;
  static constexpr std::chrono::seconds kWindow{60};
  static constexpr std::chrono::seconds kRefusedFor{60};
  /// Peers remembered at once; past it, the one heard of least recently is forgotten.
  static constexpr size_t kMostPeers = 1024;

  /// Notes a remote access error that `peer` caused; true if that makes it refused.
  bool note_access_error(const ConnectionPeer& peer, Clock::time_point now);
  /// Whether `peer` is refused now.
  bool refused(const ConnectionPeer& peer, Clock::time_point now) const;

 private:
  struct Record {
    ConnectionPeer peer;
    uint32_t errors = 0;
    Clock::time_point window_start;
    Clock::time_point refused_until;
    Clock::time_point last_heard;
  };
  const Record* find(const ConnectionPeer& peer) const;
  std::vector<Record> records_;
};

/// This process's.
PeerPenalties& peer_penalties();

}  // namespace softrdma::wire

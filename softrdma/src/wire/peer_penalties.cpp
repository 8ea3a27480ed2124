#include "wire/peer_penalties.hpp"

#include <algorithm>
#include <cstring>

namespace softrdma::wire {
namespace {

bool same(const ConnectionPeer& a, const ConnectionPeer& b) {
  return std::memcmp(a.gid, b.gid, sizeof a.gid) == 0 && a.identity == b.identity;
}

}  // namespace

const PeerPenalties::Record* PeerPenalties::find(const ConnectionPeer& peer) const {
  const auto it = std::find_if(records_.begin(), records_.end(),
                               [&](const Record& r) { return same(r.peer, peer); });
  return it == records_.end() ? nullptr : &*it;
}

bool PeerPenalties::note_access_error(const ConnectionPeer& peer, Clock::time_point now) {
  auto* r = const_cast<Record*>(find(peer));
  if (!r) {
    if (records_.size() >= kMostPeers)
      records_.erase(std::min_element(
          records_.begin(), records_.end(),
          [](const Record& a, const Record& b) { return a.last_heard < b.last_heard; }));
    records_.push_back(Record{peer, 0, now, {}, now});
    r = &records_.back();
  }
  r->last_heard = now;
  if (now - r->window_start >= kWindow) {
    r->window_start = now;
    r->errors = 0;
  }
  if (++r->errors < kMostAccessErrors) return false;
  r->refused_until = now + kRefusedFor;
  r->errors = 0;
  r->window_start = now;
  return true;
}

bool PeerPenalties::refused(const ConnectionPeer& peer, Clock::time_point now) const {
  const Record* r = find(peer);
  return r && now < r->refused_until;
}

PeerPenalties& peer_penalties() {
  static auto* penalties = new PeerPenalties;  // used until the process ends
  return *penalties;
}

}  // namespace softrdma::wire

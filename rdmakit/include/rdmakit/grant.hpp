// Grants: access to a range of local memory given to a peer for a limited time.
//
// Each grant registers its own memory region over the range, so its rkey names that grant
// alone: revoking it (explicitly or when it expires) deregisters that region and the peer's
// later accesses fail with a remote access error, while other grants and the owner's own
// registration of the same memory keep working. A peer that never gives a grant back cannot
// keep memory reachable past its expiry. There is no background thread: the owner calls
// revoke_expired(), e.g. when its event loop's timer set to next_expiry() fires.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <system_error>

#include "rdmakit/buffer.hpp"
#include "rdmakit/memory_region.hpp"

namespace rdmakit {

/// Remote access to a range, given to a peer for a limited time.
struct Grant {
  uint64_t id = 0;  ///< for GrantTable::revoke; never 0 for a real grant
  /// What to send to the peer (RemoteBuffer::encode): address, size, the grant's rkey and
  /// expires_at_ms, the system_clock millisecond at which the grant is revoked.
  RemoteBuffer remote;
  /// The remote rights granted.
  Access rights = Access::none;
};

namespace detail {
class GrantTableState;
}

/// Hands out time-limited remote access to local memory: each grant is its own
/// registration, so revoking one cuts off exactly that range. Thread-safe.
class GrantTable {
 public:
  /// The clock of grant expiries (shared with the peer, which sees them).
  using Clock = std::chrono::system_clock;

  /// Grants may give at most `max_remote_access` (remote_read, remote_write, remote_atomic).
  /// `pd` must outlive the table; it must be the PD of the QPs peers reach the memory through.
  GrantTable(const ProtectionDomain& pd, Access max_remote_access);
  GrantTable(const GrantTable&) = delete;
  GrantTable& operator=(const GrantTable&) = delete;
  /// Takes over the other table's grants.
  GrantTable(GrantTable&&) noexcept;
  /// Revokes this table's grants, then takes over the other's.
  GrantTable& operator=(GrantTable&&) noexcept;
  /// Revokes every grant still active.
  ~GrantTable();

  /// Grants `rights` (non-empty remote rights) over `range` for `ttl` (> 0). Throws Error:
  /// Errc::grant_too_wide when `rights` exceed max_remote_access, or the verbs error of
  /// registering the range.
  Grant grant(const LocalBuffer& range, Access rights, std::chrono::milliseconds ttl);
  /// As above, for [data, data + size).
  Grant grant(void* data, size_t size, Access rights, std::chrono::milliseconds ttl);
  /// As above; on failure `ec` is set and the result has id 0.
  Grant grant(const LocalBuffer& range, Access rights, std::chrono::milliseconds ttl,
              std::error_code& ec);
  /// As above, for [data, data + size), reporting a failure in `ec`.
  Grant grant(void* data, size_t size, Access rights, std::chrono::milliseconds ttl,
              std::error_code& ec);

  /// Revokes one grant now; false if it is not active (unknown, revoked or expired and revoked).
  bool revoke(uint64_t id);
  /// Revokes the grants whose expiry is at or before `now`; returns how many.
  size_t revoke_expired(Clock::time_point now = Clock::now());
  /// When the earliest active grant expires, if there is one.
  std::optional<Clock::time_point> next_expiry() const;
  /// Grants not yet revoked.
  size_t active() const;
  /// The widest rights a grant may give.
  Access max_remote_access() const;

 private:
  std::unique_ptr<detail::GrantTableState> state_;
};

}  // namespace rdmakit

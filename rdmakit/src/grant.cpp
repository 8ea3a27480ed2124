#include "rdmakit/grant.hpp"

#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "rdmakit/error.hpp"

namespace rdmakit {
namespace detail {
namespace {

constexpr Access kRemoteRights = Access::remote_read | Access::remote_write | Access::remote_atomic;

// Verbs refuse regions that peers may write or use atomics on unless they are locally
// writable too (IBTA 10.6.3.1); local write gives the peer nothing more.
constexpr Access registration_access(Access rights) noexcept {
  return within(rights, Access::remote_read) ? rights : rights | Access::local_write;
}

}  // namespace

class GrantTableState {
 public:
  using Clock = GrantTable::Clock;

  GrantTableState(const ProtectionDomain& pd, Access max_remote_access)
      : pd_(&pd), max_remote_access_(max_remote_access) {
    RDMAKIT_REQUIRE(within(max_remote_access, kRemoteRights),
                    "GrantTable's max_remote_access may hold only remote rights");
  }

  Grant grant(void* data, size_t size, Access rights, std::chrono::milliseconds ttl,
              std::error_code& ec) {
    RDMAKIT_REQUIRE(rights != Access::none && within(rights, kRemoteRights),
                    "GrantTable::grant needs remote rights (remote_read, remote_write, "
                    "remote_atomic)");
    RDMAKIT_REQUIRE(ttl.count() > 0, "GrantTable::grant with a ttl that is not positive");
    if (!within(rights, max_remote_access_)) {
      ec = Errc::grant_too_wide;
      return {};
    }
    MemoryRegion region = pd_->register_memory(data, size, registration_access(rights), ec);
    if (ec) return {};
    // Whole milliseconds, so the expiry the peer is told is exactly when revocation is due.
    const Clock::time_point expires_at =
        std::chrono::floor<std::chrono::milliseconds>(Clock::now() + ttl);
    const auto expires_at_ms = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(expires_at.time_since_epoch())
            .count());
    Grant result;
    result.remote =
        RemoteBuffer(reinterpret_cast<uintptr_t>(data), size, region.rkey(), expires_at_ms);
    result.rights = rights;
    std::lock_guard lock(mutex_);
    result.id = next_id_++;
    by_expiry_.emplace(expires_at, result.id);
    active_.emplace(result.id, Active{std::move(region), expires_at});
    return result;
  }

  bool revoke(uint64_t id) {
    std::lock_guard lock(mutex_);
    const auto it = active_.find(id);
    if (it == active_.end()) return false;
    by_expiry_.erase({it->second.expires_at, id});
    active_.erase(it);  // deregisters: the rkey is dead from here on
    return true;
  }

  size_t revoke_expired(Clock::time_point now) {
    std::lock_guard lock(mutex_);
    size_t revoked = 0;
    while (!by_expiry_.empty() && by_expiry_.begin()->first <= now) {
      active_.erase(by_expiry_.begin()->second);
      by_expiry_.erase(by_expiry_.begin());
      ++revoked;
    }
    return revoked;
  }

  std::optional<Clock::time_point> next_expiry() const {
    std::lock_guard lock(mutex_);
    if (by_expiry_.empty()) return std::nullopt;
    return by_expiry_.begin()->first;
  }

  size_t active() const {
    std::lock_guard lock(mutex_);
    return active_.size();
  }

  Access max_remote_access() const noexcept { return max_remote_access_; }

 private:
  struct Active {
    MemoryRegion region;  // this grant's own registration
    Clock::time_point expires_at;
  };

  const ProtectionDomain* pd_;
  const Access max_remote_access_;
  mutable std::mutex mutex_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Active> active_;
  std::set<std::pair<Clock::time_point, uint64_t>> by_expiry_;  // earliest first
};

}  // namespace detail

namespace {
detail::GrantTableState& checked(const std::unique_ptr<detail::GrantTableState>& state) {
  RDMAKIT_REQUIRE(state != nullptr, "use of a moved-from rdmakit::GrantTable");
  return *state;
}
}  // namespace

GrantTable::GrantTable(const ProtectionDomain& pd, Access max_remote_access)
    : state_(std::make_unique<detail::GrantTableState>(pd, max_remote_access)) {}

GrantTable::GrantTable(GrantTable&&) noexcept = default;
GrantTable& GrantTable::operator=(GrantTable&&) noexcept = default;
GrantTable::~GrantTable() = default;

Grant GrantTable::grant(const LocalBuffer& range, Access rights, std::chrono::milliseconds ttl) {
  return grant(range.data(), range.size(), rights, ttl);
}

Grant GrantTable::grant(void* data, size_t size, Access rights, std::chrono::milliseconds ttl) {
  std::error_code ec;
  Grant result = grant(data, size, rights, ttl, ec);
  if (ec) {
    char object[160];
    std::snprintf(object, sizeof object, "GrantTable::grant of %s over [%p, +%zu) (allowed: %s)",
                  to_string(rights).c_str(), data, size,
                  to_string(checked(state_).max_remote_access()).c_str());
    throw_error(ec, object);
  }
  return result;
}

Grant GrantTable::grant(const LocalBuffer& range, Access rights, std::chrono::milliseconds ttl,
                        std::error_code& ec) {
  return grant(range.data(), range.size(), rights, ttl, ec);
}

Grant GrantTable::grant(void* data, size_t size, Access rights, std::chrono::milliseconds ttl,
                        std::error_code& ec) {
  return checked(state_).grant(data, size, rights, ttl, ec);
}

bool GrantTable::revoke(uint64_t id) {
  return checked(state_).revoke(id);
}

size_t GrantTable::revoke_expired(Clock::time_point now) {
  return checked(state_).revoke_expired(now);
}

std::optional<GrantTable::Clock::time_point> GrantTable::next_expiry() const {
  return checked(state_).next_expiry();
}

size_t GrantTable::active() const {
  return checked(state_).active();
}

Access GrantTable::max_remote_access() const {
  return checked(state_).max_remote_access();
}

}  // namespace rdmakit

#include "rdmakit/registration_cache.hpp"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "pages.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit {
namespace detail {

// One registration of whole pages [start, start + length).
struct CachedEntry {
  uintptr_t start = 0;
  size_t length = 0;
  MemoryRegion region;
  size_t holders = 0;
  // Still findable by acquire(); invalidate() clears it. Invariant: an entry that is valid
  // and not held is in the LRU list, and one that is neither is already gone.
  bool valid = true;
  std::list<CachedEntry>::iterator self;
  std::multimap<uintptr_t, CachedEntry*>::iterator index_position;  // while valid
  std::list<CachedEntry*>::iterator lru_position;                   // while valid and idle
};

class RegistrationCacheState {
 public:
  RegistrationCacheState(const ProtectionDomain& pd, size_t capacity_bytes)
      : pd_(&pd), capacity_(capacity_bytes) {}
  RegistrationCacheState(const RegistrationCacheState&) = delete;
  RegistrationCacheState& operator=(const RegistrationCacheState&) = delete;

  ~RegistrationCacheState() {
    for (const CachedEntry& entry : entries_)
      if (entry.holders != 0)
        programming_error("RegistrationCache destroyed while a CachedRegistration of " +
                          std::to_string(entry.length) + " bytes is still held");
  }

  CachedRegistration acquire(void* data, size_t size, Access access, std::error_code& ec) {
    RDMAKIT_REQUIRE(size > 0, "RegistrationCache::acquire of 0 bytes");
    const auto address = reinterpret_cast<uintptr_t>(data);
    const uintptr_t start = round_down_to_page(address);
    const uintptr_t end = round_up_to_page(address + size);
    std::lock_guard lock(mutex_);
    CachedEntry* entry = find_covering(address, address + size, access);
    if (entry) {
      ++stats_.hits;
      if (entry->holders == 0) idle_lru_.erase(entry->lru_position);
    } else {
      ++stats_.misses;
      MemoryRegion region =
          pd_->register_memory(reinterpret_cast<void*>(start), end - start, access, ec);
      if (ec) return {};
      entry = &entries_.emplace_back();
      entry->start = start;
      entry->length = end - start;
      entry->region = std::move(region);
      entry->self = std::prev(entries_.end());
      entry->index_position = by_start_.emplace(start, entry);
      longest_ = std::max(longest_, entry->length);
      stats_.bytes_registered += entry->length;
    }
    ++entry->holders;
    evict_over_capacity();
    ec.clear();
    CachedRegistration result;
    result.cache_ = this;
    result.entry_ = entry;
    result.data_ = static_cast<std::byte*>(data);
    result.size_ = size;
    result.lkey_ = entry->region.lkey();
    result.rkey_ = entry->region.rkey();
    return result;
  }

  void release(CachedEntry& entry) noexcept {
    std::lock_guard lock(mutex_);
    if (--entry.holders != 0) return;
    if (!entry.valid) {
      erase(entry);
      return;
    }
    entry.lru_position = idle_lru_.insert(idle_lru_.end(), &entry);
    evict_over_capacity();
  }

  void invalidate(void* data, size_t size) {
    const auto begin = reinterpret_cast<uintptr_t>(data);
    const uintptr_t end = begin + size;
    std::lock_guard lock(mutex_);
    // Entries starting more than longest_ bytes before `begin` cannot reach it.
    auto it = by_start_.lower_bound(begin > longest_ ? begin - longest_ : 0);
    while (it != by_start_.end() && it->first < end) {
      CachedEntry& entry = *(it++)->second;
      if (entry.start + entry.length <= begin) continue;
      if (entry.holders == 0) {
        erase(entry);
      } else {
        by_start_.erase(entry.index_position);
        entry.valid = false;  // erased by the last release
      }
    }
  }

  RegistrationCacheStats stats() const {
    std::lock_guard lock(mutex_);
    RegistrationCacheStats stats = stats_;
    stats.registrations = entries_.size();
    return stats;
  }

 private:
  // A valid registration covering [begin, end) with at least `access`, or nullptr.
  CachedEntry* find_covering(uintptr_t begin, uintptr_t end, Access access) {
    for (auto it = by_start_.upper_bound(begin); it != by_start_.begin();) {
      CachedEntry& entry = *(--it)->second;
      if (entry.start + longest_ < end) break;  // neither this nor any earlier one reaches end
      if (entry.start + entry.length >= end && within(access, entry.region.access())) return &entry;
    }
    return nullptr;
  }

  void evict_over_capacity() noexcept {
    while (stats_.bytes_registered > capacity_ && !idle_lru_.empty()) {
      ++stats_.evictions;
      erase(*idle_lru_.front());
    }
  }

  // Deregisters an entry nobody holds.
  void erase(CachedEntry& entry) noexcept {
    if (entry.valid) {
      by_start_.erase(entry.index_position);
      idle_lru_.erase(entry.lru_position);
    }
    stats_.bytes_registered -= entry.length;
    entries_.erase(entry.self);
  }

  const ProtectionDomain* pd_;
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::list<CachedEntry> entries_;                   // owns every registration, valid or not
  std::multimap<uintptr_t, CachedEntry*> by_start_;  // valid entries by start address
  std::list<CachedEntry*> idle_lru_;                 // front: used least recently
  size_t longest_ = 0;  // no valid entry is longer (never lowered: a bound, not a maximum)
  RegistrationCacheStats stats_;
};

}  // namespace detail

CachedRegistration::CachedRegistration(CachedRegistration&& other) noexcept
    : cache_(std::exchange(other.cache_, nullptr)),
      entry_(std::exchange(other.entry_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      lkey_(other.lkey_),
      rkey_(other.rkey_) {}

CachedRegistration& CachedRegistration::operator=(CachedRegistration&& other) noexcept {
  if (this != &other) {
    release();
    cache_ = std::exchange(other.cache_, nullptr);
    entry_ = std::exchange(other.entry_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    lkey_ = other.lkey_;
    rkey_ = other.rkey_;
  }
  return *this;
}

CachedRegistration::~CachedRegistration() {
  release();
}

void CachedRegistration::release() noexcept {
  if (!entry_) return;
  cache_->release(*std::exchange(entry_, nullptr));
  cache_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

namespace {
detail::RegistrationCacheState& checked(
    const std::unique_ptr<detail::RegistrationCacheState>& state) {
  RDMAKIT_REQUIRE(state != nullptr, "use of a moved-from rdmakit::RegistrationCache");
  return *state;
}
}  // namespace

RegistrationCache::RegistrationCache(const ProtectionDomain& pd, size_t capacity_bytes)
    : state_(std::make_unique<detail::RegistrationCacheState>(pd, capacity_bytes)) {}

RegistrationCache::RegistrationCache(RegistrationCache&&) noexcept = default;
RegistrationCache& RegistrationCache::operator=(RegistrationCache&&) noexcept = default;
RegistrationCache::~RegistrationCache() = default;

CachedRegistration RegistrationCache::acquire(void* data, size_t size, Access access) {
  std::error_code ec;
  CachedRegistration registration = acquire(data, size, access, ec);
  if (ec) {
    char object[128];
    std::snprintf(object, sizeof object, "RegistrationCache::acquire of [%p, +%zu) with access %s",
                  data, size, to_string(access).c_str());
    throw_error(ec, object);
  }
  return registration;
}

CachedRegistration RegistrationCache::acquire(void* data, size_t size, Access access,
                                              std::error_code& ec) {
  return checked(state_).acquire(data, size, access, ec);
}

void RegistrationCache::invalidate(void* data, size_t size) {
  checked(state_).invalidate(data, size);
}

RegistrationCacheStats RegistrationCache::stats() const {
  return checked(state_).stats();
}

}  // namespace rdmakit

// The host registry: one shared file per user that every softrdma process maps.
//
// It gives QP numbers that are unique on the host and finds the process that owns a QP or
// a memory region, with no daemon. Entries carry the owner's identity (pid + start time),
// so entries of processes that died are recognised and reused. Each registry (each user)
// numbers its QPs in a range of its own, claimed host-wide, so that a QP number says which
// user's processes own it and which port they listen on.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/process_identity.hpp"
#include "common/process_lock.hpp"
#include "engine/device_counters.hpp"
#include "engine/entry_pins.hpp"
#include "engine/shared_pages.hpp"

namespace softrdma {

enum class SlotState : uint32_t { kFree = 0, kClaimed = 1, kLive = 2 };

/// A slot's state word: its SlotState in the low byte and, above it, how many times the slot
/// was claimed. Every claim advances that count, so a compare-and-swap from a word read
/// before another process claimed the slot fails: two processes reclaiming one dead owner's
/// slot cannot both take it, nor take it from the process that just made it live (ABA).
/// Between claims only the slot's owner changes the state, keeping the count.
namespace slot_word {
inline constexpr uint32_t kStateMask = 0xff;
static_assert(static_cast<uint32_t>(SlotState::kLive) <= kStateMask);
inline SlotState state(uint32_t word) {
  return static_cast<SlotState>(word & kStateMask);
}
/// The word of a claim made from `word`: claimed, the count advanced (wrapping).
inline uint32_t claimed_from(uint32_t word) {
  return ((word & ~kStateMask) + (kStateMask + 1)) | static_cast<uint32_t>(SlotState::kClaimed);
}
inline bool is_live(const std::atomic<uint32_t>& word) {
  return state(word.load(std::memory_order_acquire)) == SlotState::kLive;
}
/// The owner's change of its slot's state.
inline void set(std::atomic<uint32_t>& word, SlotState s, std::memory_order order) {
  word.store((word.load(std::memory_order_relaxed) & ~kStateMask) | static_cast<uint32_t>(s),
             order);
}
}  // namespace slot_word

/// Where a QP lives: the owner process and the QP's shared block in the owner's arena.
/// Read-mostly: the pins of the peers delivering into it live in a line of their own
/// (Registry::qp_pins).
struct alignas(64) QpSlot {
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> generation;
  int32_t pid;
  uint64_t start_time;
  uint64_t netns;
  uint64_t qp_offset;  // QpShared inside the owner's arena
  int32_t arena_fd;    // the owner's arena memfd, as numbered in the owner
  // Which same-host requesters may announce accesses to it (Registry::note_reached_directly):
  // only then must retiring it wait for announcements, and only for theirs.
  std::atomic<uint32_t> reached_directly;
  uint64_t reserved;
};
static_assert(sizeof(QpSlot) == 64);

/// What a key names: a registered region, or a memory window (bound into a region).
enum class KeyKind : uint32_t { kRegion = 0, kWindowType1 = 1, kWindowType2 = 2 };

/// A registered memory region or a memory window, looked up by its key (for a region,
/// lkey == rkey). Read-mostly: the pins accessors take live in a line of their own
/// (Registry::mr_pins). A window's iova/length/access are those it is bound with (length 0:
/// unbound).
struct alignas(64) MrSlot {
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> key;  // 0 while not live
  int32_t pid;
  uint32_t access;  // ibv_access_flags
  uint32_t pd_id;
  uint64_t start_time;
  uint64_t iova;
  uint64_t length;
  uint64_t host_addr;  // address of iova in the owner's address space
  int32_t memfd;       // the owner's memfd holding the pages (see shared_pages.hpp), or -1
  KeyKind kind;
  uint64_t memfd_serial;          // which memfd that number names now
  uint64_t memfd_offset;          // of host_addr in that memfd
  uint32_t parent_key;            // window: the region it is bound into (0: unbound)
  uint32_t bound_qpn;             // type 2 window: the only QP through which it may be used
  std::atomic<uint32_t> windows;  // region: windows bound into it (ibv_dereg_mr: EBUSY)
  // Bumped whenever the slot describes something new (registration, rereg), while its key
  // is unpublished: a peer's cached copy of the description is valid while this matches.
  std::atomic<uint32_t> generation;
  // A same-host requester may announce accesses to it (as QpSlot::reached_directly).
  std::atomic<uint32_t> reached_directly;
};

/// A UD QP attached to a multicast group (ibv_attach_mcast).
struct alignas(64) McastSlot {
  std::atomic<uint32_t> state;
  uint32_t qpn;
  int32_t pid;
  uint32_t pad;
  uint64_t start_time;
  uint64_t netns;  // the "host" of the member (see QpSlot)
  uint8_t gid[16];
};
static_assert(sizeof(McastSlot) == 64);

/// What a requester QP's same-host access relies on right now (engine/direct_post.cpp):
/// the target QP's number and the key of the region it reaches, announced before either is
/// checked. Destroying that QP or retiring that key waits until the word names it no more.
/// The requester pins nothing per access, so no line is shared with other processes on its
/// way; one line per QP, written only by its requester.
struct alignas(64) DirectAccess {
  std::atomic<uint64_t> word;  // 0: outside any access
  static uint64_t of(uint32_t target_qpn, uint32_t key) { return uint64_t{target_qpn} << 32 | key; }
};
static_assert(sizeof(DirectAccess) == 64);

class Registry {
 public:
  static constexpr uint32_t kQpCapacity = 16384;
  static constexpr uint32_t kMrCapacity = 65536;
  static constexpr uint32_t kFirstQpn = 0x100;
  // QP number ranges of kQpCapacity, one per registry, 24-bit numbers all.
  static constexpr uint32_t kQpnRanges = ((1u << 24) - kFirstQpn) / kQpCapacity;
  static constexpr uint32_t kAtomicStripes = 4096;
  static constexpr uint32_t kMcastCapacity = 4096;  // attachments, all groups together
  // A key is 32 bits from the kernel's CSPRNG. Its upper 24 bits name its slot: a hash keyed
  // with the registry's secret gives the slot they start looking from (the key says nothing
  // of the slot's index), and the key lies at most kKeyProbe slots further. The low byte is
  // the "key" part that ibv_inc_rkey changes when a window is bound again.
  static constexpr uint32_t kKeyVariantBits = 8;
  static constexpr uint32_t kKeyProbe = 64;
  static_assert(32 - kKeyVariantBits >= 24, "at least 24 random bits name a key");
  static_assert((kMrCapacity & (kMrCapacity - 1)) == 0 && kKeyProbe < kMrCapacity);
  /// Keys `a` and `b` name the same slot (they differ at most in the variant byte).
  static bool same_key_name(uint32_t a, uint32_t b) {
    return a != 0 && (a >> kKeyVariantBits) == (b >> kKeyVariantBits);
  }
  static_assert(kFirstQpn + kQpnRanges * kQpCapacity <= (1u << 24), "QP numbers are 24 bits");

  /// Maps (creating if needed) the registry of this user. Throws std::system_error.
  /// Inline: every same-host operation that misses a cache asks for it.
  static Registry& instance() {
    if (Registry* r = mapped_.load(std::memory_order_acquire)) [[likely]]
      return *r;
    return map_instance();
  }

  /// The range that `qpn` falls in (kQpnRanges for a number in none).
  static uint32_t qpn_range(uint32_t qpn) {
    return qpn < kFirstQpn ? kQpnRanges : std::min((qpn - kFirstQpn) / kQpCapacity, kQpnRanges);
  }
  /// This registry's range, and whether `qpn` is in it (a QP of this user).
  uint32_t own_qpn_range() const { return qpn_range_; }
  bool owns_qpn(uint32_t qpn) const { return qpn_range(qpn) == qpn_range_; }
  /// The n-th QP number of this registry's range.
  uint32_t qpn_at(uint32_t index) const { return first_qpn_ + index; }

  /// Claims a QP number for a QP whose shared block is at `qp_offset` in this process's arena.
  /// Returns 0 when the table is full.
  uint32_t claim_qpn(uint64_t qp_offset, int arena_fd);
  /// Frees `qpn` once no peer is inside the QP (pinned or announced in a DirectAccess).
  void release_qpn(uint32_t qpn);
  /// The slot of `qpn`, or nullptr when out of range.
  QpSlot* qp_slot(uint32_t qpn);
  /// The peers delivering into the QP of `slot` (one of qp_slot's) right now.
  EntryPins& qp_pins(const QpSlot& slot) { return qp_pins_[&slot - qps_]; }
  /// The word in which QP `qpn` of this registry announces its same-host accesses.
  DirectAccess& direct_access(uint32_t qpn) { return direct_[qpn - first_qpn_]; }
  /// A QP slot's `reached_directly` mark names the requester QP that announces accesses to
  /// it (its direct_access word), or says that several may.
  static constexpr uint32_t kReachedByMany = ~uint32_t{0};
  uint32_t reacher_mark(uint32_t qpn) const { return qpn - first_qpn_ + 1; }
  static_assert(kQpCapacity < kReachedByMany, "a mark names a QP slot, or many");
  /// Marks a QP or region slot as one that requester `by` (reacher_mark) may reach with
  /// announced accesses; before its first announcement naming it, and before the checks
  /// that follow it. Retiring a slot never so marked skips the fence and the look at the
  /// announcements; one marked by a single requester looks at its word alone, not at every
  /// QP's (a long-lived registry's QP slots run into the thousands).
  static void note_reached_directly(std::atomic<uint32_t>& mark, uint32_t by) {
    uint32_t seen = mark.load(std::memory_order_seq_cst);
    while (seen != by && seen != kReachedByMany) {
      // An RMW, as the retirer's unpublishing store and load of the mark pair with it.
      if (mark.compare_exchange_weak(seen, seen == 0 ? by : kReachedByMany,
                                     std::memory_order_seq_cst))
        return;
    }
  }

  /// Registers a memory region; returns its key, or 0 when the table is full.
  uint32_t claim_mr(uint32_t pd_id, uint32_t access, uint64_t iova, uint64_t length,
                    uint64_t host_addr, const SharedPages* pages);
  /// Unpublishes `key` and waits until no peer is inside the region any more (pinned or
  /// announced in a DirectAccess).
  void release_mr(uint32_t key);
  /// ibv_rereg_mr: the region `key` takes the new attributes under the same key (peers
  /// holding the rkey keep using it); false when `key` is not live.
  bool update_mr(uint32_t key, uint32_t pd_id, uint32_t access, uint64_t iova, uint64_t length,
                 uint64_t host_addr, const SharedPages* pages);
  /// A memory window of `pd_id` owned by this process, unbound; its key, or 0 when full.
  uint32_t claim_window(uint32_t pd_id, KeyKind kind);
  /// The slot whose published key names the same slot as `key` (same_key_name), or nullptr
  /// when none does (a key never issued, retired, or unpublished while it changes). The
  /// caller compares the whole key.
  MrSlot* mr_slot(uint32_t key);
  /// The accessors inside `slot` (one of mr_slot's).
  EntryPins& mr_pins(const MrSlot& slot) { return mr_pins_[mr_slot_index(slot)]; }
  uint32_t mr_slot_index(const MrSlot& slot) const { return static_cast<uint32_t>(&slot - mrs_); }
  /// Waits (bounded) until no accessor that pinned `slot` or announced `key` (its key before
  /// it was unpublished) is inside any more.
  void wait_until_unused(MrSlot& slot, uint32_t key);

  /// Attaches QP `qpn` of this process to group `gid`: true if attached (or already),
  /// false when the table is full.
  bool attach_mcast(const uint8_t gid[16], uint32_t qpn);
  /// Detaches it; false if it was not attached.
  bool detach_mcast(const uint8_t gid[16], uint32_t qpn);
  /// Calls fn(qpn, pid) for every member of `gid` in this network namespace.
  template <typename Fn>
  void for_each_mcast_member(const uint8_t gid[16], Fn fn) {
    for (uint32_t i = 0; i < kMcastCapacity; ++i) {
      const McastSlot& m = mcasts_[i];
      if (slot_word::is_live(m.state) && m.netns == self_netns() &&
          std::memcmp(m.gid, gid, 16) == 0)
        fn(m.qpn, m.pid);
    }
  }

  /// Host-wide lock serialising atomics on one 8-byte word of one process.
  ProcessLock& atomic_lock(pid_t pid, uint64_t host_addr);

  /// The user's secret on this host: random, made when the registry is, never leaves it. The
  /// identities this user's links present are derived from it (wire/hello.hpp).
  static constexpr size_t kHostSecretBytes = 32;
  const std::array<uint8_t, kHostSecretBytes>& host_secret() const { return host_secret_; }
  /// What the device counts of the traffic it refused (engine/device_counters.hpp).
  DeviceCounters& counters();
  /// The registry file.
  const std::string& path() const { return path_; }

 private:
  struct Header;
  static Registry& map_instance();
  static inline std::atomic<Registry*> mapped_{nullptr};  // set once mapped, never changed
  // A random word, stored in `word` unless a process stored one first; the word's value.
  static uint64_t set_once(std::atomic<uint64_t>& word);

  Registry(void* base, uint32_t qpn_range, std::string path);
  // An MR slot claimed for this process with its key chosen; published by publish_key.
  MrSlot* claim_key_slot(KeyKind kind, uint32_t pd_id, uint32_t& key);
  // Publishes `key` in `s`; false (and `s` freed) when another slot took a key of the same
  // name at the same time and keeps it: the claimer picks another key.
  bool publish_key(MrSlot& s, uint32_t key);
  // Where the slots that a key of this name may be in start (keyed with the secret).
  uint32_t key_home(uint32_t key) const;
  // The live slot nearest `key`'s home that holds a key of the same name, other than `not`.
  MrSlot* named_slot(uint32_t key, const MrSlot* not_this) const;
  // Waits (bounded) until no DirectAccess word that `mark` (a slot's reached_directly) may
  // stand for, masked, equals `value`.
  void wait_for_direct_accessors(uint32_t mark, uint64_t mask, uint64_t value);
  Header* header_;
  uint64_t key_secret_ = 0;  // header_->key_secret
  std::array<uint8_t, kHostSecretBytes> host_secret_{};
  std::string path_;
  uint32_t qpn_range_;
  uint32_t first_qpn_;
  QpSlot* qps_;
  MrSlot* mrs_;
  EntryPins* mr_pins_;
  ProcessLock* atomic_locks_;
  McastSlot* mcasts_;
  EntryPins* qp_pins_;
  DirectAccess* direct_;
};

}  // namespace softrdma

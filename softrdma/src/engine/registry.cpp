#include "engine/registry.hpp"

#include "common/asymmetric_fence.hpp"
#include "common/secure_random.hpp"
#include "engine/range_claims.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

namespace softrdma {

struct Registry::Header {
  std::atomic<uint64_t> magic;
  uint32_t layout_version;
  uint32_t pad;
  std::atomic<uint32_t> next_qp;
  std::atomic<uint32_t> qp_high_water;  // no QP slot at or past it was ever claimed
  // Keys the hash of a key's name to its home slot (key_home); set once, by whichever process
  // maps the file first.
  std::atomic<uint64_t> key_secret;
  // The user's secret on this host (host_secret): each word set once, by whichever process
  // sets it first, before any process reads it.
  std::atomic<uint64_t> host_secret[Registry::kHostSecretBytes / sizeof(uint64_t)];
  DeviceCounters counters;
  RangeClaim range_claim;  // the QP number range this registry claimed (engine/range_claims.hpp)
};

namespace {

constexpr uint64_t kMagic = 0x38764d4452544653ull;  // "SFTRDMv8"
// 12: a slot's reached_directly names its one requester (11 said only "some"); a library
// of each in one registry would trust each other's marks wrongly. 13: a region's pins are
// held under their processes' pids (EntryPins), where 12 kept one bare count, and so are a
// QP's, in a table of their own. 14: receive queues hold a power of two of slots, found by a
// mask (13 divided by any capacity). 16: keys are 32 random bits, found from a keyed hash
// of their name (15 held the slot index in their middle bits); the host secret and the
// device's counters.
constexpr uint32_t kLayoutVersion = 16;
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kQpBytes = sizeof(QpSlot) * Registry::kQpCapacity;
constexpr size_t kMrBytes = sizeof(MrSlot) * Registry::kMrCapacity;
constexpr size_t kMrPinsBytes = sizeof(EntryPins) * Registry::kMrCapacity;
constexpr size_t kDirectBytes = sizeof(DirectAccess) * Registry::kQpCapacity;
constexpr size_t kQpPinsBytes = sizeof(EntryPins) * Registry::kQpCapacity;
constexpr size_t kLockBytes = sizeof(ProcessLock) * Registry::kAtomicStripes;
constexpr size_t kMcastBytes = sizeof(McastSlot) * Registry::kMcastCapacity;
constexpr size_t kFileBytes = kHeaderBytes + kQpBytes + kMrBytes + kMrPinsBytes + kLockBytes +
                              kMcastBytes + kQpPinsBytes + kDirectBytes;

// The registry file of this user: SOFTRDMA_REGISTRY, else /dev/shm/softrdma-v<layout>-<uid>.
std::string default_registry_path() {
  if (const char* p = std::getenv("SOFTRDMA_REGISTRY")) return p;
  char buf[64];
  std::snprintf(buf, sizeof buf, "/dev/shm/softrdma-v%u-%u", kLayoutVersion,
                static_cast<unsigned>(geteuid()));
  return buf;
}

// Opens (creating) the file at `path` as this user's alone: a file another user made there,
// one others may write, or a link is refused (EPERM), for another user could then write
// this user's registry. -1 with errno on failure.
int open_private_file(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return errno == ELOOP ? (errno = EPERM, -1) : -1;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    close(fd);
    errno = EPERM;
    return -1;
  }
  return fd;
}

// Where this user's registry falls back to when its name in /dev/shm was taken by another
// user: $XDG_RUNTIME_DIR, if it is a directory of this user's that only it may write.
std::string fallback_registry_path() {
  const char* dir = std::getenv("XDG_RUNTIME_DIR");
  struct stat st {};
  if (!dir || !*dir || lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return "";
  char name[32];
  std::snprintf(name, sizeof name, "/softrdma-v%u", kLayoutVersion);
  return std::string(dir) + name;
}

// The registry file, opened: at its usual path, or at the fallback when another user took
// that one. Throws std::system_error saying what to do when neither can be used.
int open_registry(std::string& path) {
  path = default_registry_path();
  int fd = open_private_file(path);
  if (fd >= 0 || errno != EPERM || std::getenv("SOFTRDMA_REGISTRY")) {
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + path);
    return fd;
  }
  const std::string taken = path;
  path = fallback_registry_path();
  if (!path.empty()) fd = open_private_file(path);
  if (fd < 0)
    throw std::system_error(EPERM, std::generic_category(),
                            taken +
                                " was made by another user (or is a link): remove it, or set "
                                "XDG_RUNTIME_DIR or SOFTRDMA_REGISTRY to a directory of yours");
  return fd;
}

// A new key: 32 bits from the CSPRNG, its name (all but the variant byte) never 0, so no key
// is 0.
uint32_t random_key() {
  for (;;) {
    const uint32_t key = secure_random_u32();
    if (key >> Registry::kKeyVariantBits) return key;
  }
}

bool owner_dead(pid_t pid, uint64_t start_time) {
  return !process_alive(ProcessId{pid, start_time});
}

// A claimer scanning for slots of dead owners reads a live slot's owner while another
// claimer may be writing it; that reader's compare-and-swap then fails and drops what it
// read, but the fields are still read and written as atomics.
template <typename Slot>
ProcessId slot_owner(Slot& s) {
  return {std::atomic_ref(s.pid).load(std::memory_order_relaxed),
          std::atomic_ref(s.start_time).load(std::memory_order_relaxed)};
}

template <typename Slot>
void set_slot_owner(Slot& s, const ProcessId& owner) {
  std::atomic_ref(s.pid).store(owner.pid, std::memory_order_relaxed);
  std::atomic_ref(s.start_time).store(owner.start_time, std::memory_order_relaxed);
}

// Claims the first of `count` slots from `start` on (round the table of `capacity`) that is
// free or whose owner died. The claim's
// compare-and-swap covers the slot's claim count (slot_word), so a reclaimer that judged the
// owner dead on a word another process has claimed since fails and looks further.
// Whether an owner lives is asked of /proc once per run of slots of one owner (a process's
// slots tend to lie together), never of this process, and an owner found dead is remembered
// (it stays dead) for the claims that follow. `reusable(index)` may pass over a slot that
// would otherwise be claimable.
template <typename Slot, typename Reusable = bool (*)(uint32_t)>
Slot* claim_slot(
    Slot* slots, uint32_t capacity, uint32_t start, uint32_t count, uint32_t& index,
    Reusable reusable = [](uint32_t) { return true; }) {
  static thread_local ProcessId known_dead{};
  ProcessId asked = self_process();
  bool asked_dead = false;
  auto dead = [&](Slot& s) {
    const ProcessId owner = slot_owner(s);
    if (owner != asked) {
      asked = owner;
      asked_dead = owner == known_dead || owner_dead(owner.pid, owner.start_time);
      if (asked_dead) known_dead = owner;
    }
    return asked_dead;
  };
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t idx = (start + i) % capacity;
    Slot& s = slots[idx];
    uint32_t word = s.state.load(std::memory_order_acquire);
    const SlotState state = slot_word::state(word);
    const bool claimable = state == SlotState::kFree || (state == SlotState::kLive && dead(s));
    if (claimable && reusable(idx) &&
        s.state.compare_exchange_strong(word, slot_word::claimed_from(word))) {
      index = idx;
      return &s;
    }
  }
  return nullptr;
}

// claim_slot over the whole table from a rotating `hint`.
template <typename Slot, typename Reusable = bool (*)(uint32_t)>
Slot* claim_slot_from_hint(
    Slot* slots, uint32_t capacity, std::atomic<uint32_t>& hint, uint32_t& index,
    Reusable reusable = [](uint32_t) { return true; }) {
  Slot* s =
      claim_slot(slots, capacity, hint.load(std::memory_order_relaxed), capacity, index, reusable);
  if (s) hint.store(index + 1, std::memory_order_relaxed);
  return s;
}

}  // namespace

Registry& Registry::map_instance() {
  static Registry* registry = [] {
    std::string path;
    const int fd = open_registry(path);
    struct stat st {};
    if (fstat(fd, &st) != 0 || (static_cast<size_t>(st.st_size) < kFileBytes &&
                                ftruncate(fd, static_cast<off_t>(kFileBytes)) != 0)) {
      int err = errno;
      close(fd);
      throw std::system_error(err, std::generic_category(), "size " + path);
    }
    void* base = mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap");
    // A zero-filled file is a valid empty registry, its claim lock free.
    RangeClaim& claim = static_cast<Header*>(base)->range_claim;
    return new Registry(base, claim_qpn_range(path, claim, kQpnRanges), path);
  }();
  mapped_.store(registry, std::memory_order_release);
  return *registry;
}

Registry::Registry(void* base, uint32_t qpn_range, std::string path)
    : header_(static_cast<Header*>(base)),
      qpn_range_(qpn_range),
      first_qpn_(kFirstQpn + qpn_range * kQpCapacity),
      qps_(reinterpret_cast<QpSlot*>(static_cast<char*>(base) + kHeaderBytes)),
      mrs_(reinterpret_cast<MrSlot*>(static_cast<char*>(base) + kHeaderBytes + kQpBytes)),
      mr_pins_(reinterpret_cast<EntryPins*>(static_cast<char*>(base) + kHeaderBytes + kQpBytes +
                                            kMrBytes)),
      atomic_locks_(reinterpret_cast<ProcessLock*>(static_cast<char*>(base) + kHeaderBytes +
                                                   kQpBytes + kMrBytes + kMrPinsBytes)),
      mcasts_(reinterpret_cast<McastSlot*>(static_cast<char*>(base) + kHeaderBytes + kQpBytes +
                                           kMrBytes + kMrPinsBytes + kLockBytes)),
      qp_pins_(reinterpret_cast<EntryPins*>(static_cast<char*>(base) + kFileBytes - kDirectBytes -
                                            kQpPinsBytes)),
      direct_(
          reinterpret_cast<DirectAccess*>(static_cast<char*>(base) + kFileBytes - kDirectBytes)) {
  static_assert(sizeof(Header) <= kHeaderBytes, "the header fits its page");
  // A zero-filled file is a valid empty registry; the magic only marks the layout.
  uint64_t expected = 0;
  header_->magic.compare_exchange_strong(expected, kMagic);
  if (header_->magic.load() != kMagic)
    throw std::system_error(EPROTO, std::generic_category(), "registry layout mismatch");
  header_->layout_version = kLayoutVersion;
  path_ = std::move(path);
  key_secret_ = set_once(header_->key_secret);
  for (size_t i = 0; i < std::size(header_->host_secret); ++i) {
    const uint64_t word = set_once(header_->host_secret[i]);
    std::memcpy(host_secret_.data() + i * sizeof word, &word, sizeof word);
  }
}

uint64_t Registry::set_once(std::atomic<uint64_t>& word) {
  uint64_t secret = 0;
  while (secret == 0) secret = secure_random_u64();
  uint64_t unset = 0;
  word.compare_exchange_strong(unset, secret);
  return word.load();
}

DeviceCounters& Registry::counters() {
  return header_->counters;
}

uint32_t Registry::claim_qpn(uint64_t qp_offset, int arena_fd) {
  uint32_t index = 0;
  // As for keys (claim_key_slot): a slot whose pins never drained is left alone. Zeroing
  // them instead would let a late drop of a peer's hold on the old QP wrap its count round.
  QpSlot* s = claim_slot_from_hint(qps_, kQpCapacity, header_->next_qp, index, [this](uint32_t i) {
    return qp_pins_[i].drained_but_for_the_dead();
  });
  if (!s) return 0;
  set_slot_owner(*s, self_process());
  s->netns = self_netns();
  s->qp_offset = qp_offset;
  s->arena_fd = arena_fd;
  direct_[index].word.store(0, std::memory_order_relaxed);  // a dead owner may have left it set
  s->reached_directly.store(0, std::memory_order_relaxed);
  s->generation.fetch_add(1, std::memory_order_relaxed);
  uint32_t high = header_->qp_high_water.load(std::memory_order_relaxed);
  while (high <= index && !header_->qp_high_water.compare_exchange_weak(high, index + 1)) {
  }
  slot_word::set(s->state, SlotState::kLive, std::memory_order_release);
  return first_qpn_ + index;
}

QpSlot* Registry::qp_slot(uint32_t qpn) {
  if (!owns_qpn(qpn)) return nullptr;
  return &qps_[qpn - first_qpn_];
}

namespace {
// Waits (bounded) until no peer is inside an entry being retired. A peer that died inside
// cannot touch memory any more, so the bound only matters for a dead accessor whose death
// the entry cannot show (an unnamed pin).
void wait_until_drained(EntryPins& pins) {
  using namespace std::chrono;
  const auto deadline = steady_clock::now() + seconds(2);
  for (int i = 0; !pins.drained_but_for_the_dead(); ++i) {
    if (steady_clock::now() > deadline) break;
    if (i > 100) std::this_thread::sleep_for(microseconds(50));
  }
}

// What a region slot says about the memory (everything but its owner and key).
void describe_region(MrSlot& s, uint32_t pd_id, uint32_t access, uint64_t iova, uint64_t length,
                     uint64_t host_addr, const SharedPages* pages) {
  s.pd_id = pd_id;
  s.access = access;
  s.iova = iova;
  s.length = length;
  s.host_addr = host_addr;
  s.memfd = pages ? pages->fd : -1;
  s.memfd_serial = pages ? pages->serial : 0;
  s.memfd_offset = pages ? pages->offset : 0;
  s.generation.fetch_add(1, std::memory_order_relaxed);  // ordered by the key's publication
}
}  // namespace

void Registry::wait_for_direct_accessors(uint32_t mark, uint64_t mask, uint64_t value) {
  using namespace std::chrono;
  if (mark == 0) return;
  const auto deadline = steady_clock::now() + seconds(2);
  heavy_fence();  // pairs with the light fence after an announcement (direct_post.cpp)
  const bool many = mark == kReachedByMany;
  const uint32_t from = many ? 0 : mark - 1;
  const uint32_t to = many ? header_->qp_high_water.load(std::memory_order_acquire) : mark;
  for (uint32_t i = from; i < to && i < kQpCapacity; ++i) {
    const std::atomic<uint64_t>& word = direct_[i].word;
    for (int spins = 0; (word.load(std::memory_order_seq_cst) & mask) == value; ++spins) {
      // An access is a copy and a completion: long only for a large copy, or a dead owner.
      const QpSlot& s = qps_[i];
      if (steady_clock::now() > deadline || (spins > 100 && owner_dead(s.pid, s.start_time))) break;
      if (spins > 100) std::this_thread::sleep_for(microseconds(50));
    }
  }
}

void Registry::release_qpn(uint32_t qpn) {
  QpSlot* s = qp_slot(qpn);
  if (!s) return;
  slot_word::set(s->state, SlotState::kClaimed, std::memory_order_seq_cst);
  wait_until_drained(qp_pins(*s));
  // Loaded after the state is unpublished: a requester that marks it later sees that state.
  wait_for_direct_accessors(s->reached_directly.load(std::memory_order_seq_cst), ~uint64_t{0} << 32,
                            DirectAccess::of(qpn, 0));
  slot_word::set(s->state, SlotState::kFree, std::memory_order_release);
}

namespace {
// New keys drawn before a claim gives up: only a table nearly full around every key drawn
// (each names kKeyProbe slots of its own) fails them all.
constexpr int kKeyDraws = 64;
}  // namespace

uint32_t Registry::key_home(uint32_t key) const {
  // A 64-bit mix (splitmix64's finaliser) of the name and the secret: the home says nothing
  // of the key to whoever does not know the secret.
  uint64_t x = (uint64_t{key >> kKeyVariantBits} ^ key_secret_) * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  return static_cast<uint32_t>(x) & (kMrCapacity - 1);
}

MrSlot* Registry::named_slot(uint32_t key, const MrSlot* not_this) const {
  const uint32_t home = key_home(key);
  for (uint32_t i = 0; i < kKeyProbe; ++i) {
    MrSlot& s = mrs_[(home + i) & (kMrCapacity - 1)];
    if (&s != not_this && same_key_name(s.key.load(std::memory_order_acquire), key)) return &s;
  }
  return nullptr;
}

MrSlot* Registry::claim_key_slot(KeyKind kind, uint32_t pd_id, uint32_t& key) {
  for (int draw = 0; draw < kKeyDraws; ++draw) {
    key = random_key();
    if (named_slot(key, nullptr)) continue;  // a live key of that name: draw another
    uint32_t index = 0;
    // A slot whose pins never drained is left alone: an unnamed pin of a process killed
    // while it held it stays for good, and a region registered there would make its
    // ibv_dereg_mr wait out the bound of wait_until_drained. (A pin of a stale key, which
    // drops at once, only moves a claim on to the next slot.)
    MrSlot* s = claim_slot(mrs_, kMrCapacity, key_home(key), kKeyProbe, index,
                           [this](uint32_t i) { return mr_pins_[i].drained_but_for_the_dead(); });
    if (!s) continue;
    set_slot_owner(*s, self_process());
    s->kind = kind;
    s->pd_id = pd_id;
    s->parent_key = 0;
    s->bound_qpn = 0;
    s->windows.store(0, std::memory_order_relaxed);
    s->reached_directly.store(0, std::memory_order_relaxed);
    return s;
  }
  return nullptr;
}

bool Registry::publish_key(MrSlot& s, uint32_t key) {
  s.key.store(key, std::memory_order_seq_cst);
  slot_word::set(s.state, SlotState::kLive, std::memory_order_release);
  // Two claimers that drew keys of one name at once both passed the look for it; of the two
  // slots, the one a lookup reaches first keeps it (each sees the other once both published).
  const MrSlot* other = named_slot(key, &s);
  const uint32_t home = key_home(key);
  const auto distance = [&](const MrSlot& slot) {
    return (mr_slot_index(slot) - home) & (kMrCapacity - 1);
  };
  if (!other || distance(*other) > distance(s)) return true;
  s.key.store(0, std::memory_order_seq_cst);
  wait_until_unused(s, key);  // a peer may have guessed the key meanwhile
  slot_word::set(s.state, SlotState::kFree, std::memory_order_release);
  return false;
}

uint32_t Registry::claim_mr(uint32_t pd_id, uint32_t access, uint64_t iova, uint64_t length,
                            uint64_t host_addr, const SharedPages* pages) {
  for (int draw = 0; draw < kKeyDraws; ++draw) {
    uint32_t key = 0;
    MrSlot* s = claim_key_slot(KeyKind::kRegion, pd_id, key);
    if (!s) return 0;
    describe_region(*s, pd_id, access, iova, length, host_addr, pages);
    if (publish_key(*s, key)) return key;
  }
  return 0;
}

uint32_t Registry::claim_window(uint32_t pd_id, KeyKind kind) {
  for (int draw = 0; draw < kKeyDraws; ++draw) {
    uint32_t key = 0;
    MrSlot* s = claim_key_slot(kind, pd_id, key);
    if (!s) return 0;
    describe_region(*s, pd_id, 0, 0, 0, 0, nullptr);
    if (publish_key(*s, key)) return key;
  }
  return 0;
}

void Registry::release_mr(uint32_t key) {
  MrSlot* s = mr_slot(key);
  if (!s || s->key.load() != key) return;
  s->key.store(0, std::memory_order_seq_cst);
  wait_until_unused(*s, key);
  slot_word::set(s->state, SlotState::kFree, std::memory_order_release);
}

bool Registry::update_mr(uint32_t key, uint32_t pd_id, uint32_t access, uint64_t iova,
                         uint64_t length, uint64_t host_addr, const SharedPages* pages) {
  MrSlot* s = mr_slot(key);
  if (!s || s->key.load() != key) return false;
  // Unpublished while it changes: an access meanwhile fails its key check, never sees a
  // mix of old and new attributes.
  s->key.store(0, std::memory_order_seq_cst);
  wait_until_unused(*s, key);
  describe_region(*s, pd_id, access, iova, length, host_addr, pages);
  s->key.store(key, std::memory_order_release);
  return true;
}

void Registry::wait_until_unused(MrSlot& slot, uint32_t key) {
  wait_until_drained(mr_pins(slot));
  // The caller unpublished the key first: a requester that marks the slot later sees that.
  wait_for_direct_accessors(slot.reached_directly.load(std::memory_order_seq_cst), 0xffffffffu,
                            key);
}

MrSlot* Registry::mr_slot(uint32_t key) {
  return key == 0 ? nullptr : named_slot(key, nullptr);
}

bool Registry::attach_mcast(const uint8_t gid[16], uint32_t qpn) {
  bool attached = false;
  for_each_mcast_member(gid, [&](uint32_t member, pid_t) { attached |= member == qpn; });
  if (attached) return true;
  std::atomic<uint32_t> hint{0};
  uint32_t index = 0;
  McastSlot* m = claim_slot_from_hint(mcasts_, kMcastCapacity, hint, index);
  if (!m) return false;
  m->qpn = qpn;
  set_slot_owner(*m, self_process());
  m->netns = self_netns();
  std::memcpy(m->gid, gid, 16);
  slot_word::set(m->state, SlotState::kLive, std::memory_order_release);
  return true;
}

bool Registry::detach_mcast(const uint8_t gid[16], uint32_t qpn) {
  const ProcessId& me = self_process();
  for (uint32_t i = 0; i < kMcastCapacity; ++i) {
    McastSlot& m = mcasts_[i];
    if (slot_word::is_live(m.state) && m.qpn == qpn && m.pid == me.pid &&
        m.start_time == me.start_time && std::memcmp(m.gid, gid, 16) == 0) {
      slot_word::set(m.state, SlotState::kFree, std::memory_order_release);
      return true;
    }
  }
  return false;
}

ProcessLock& Registry::atomic_lock(pid_t pid, uint64_t host_addr) {
  uint64_t h = (host_addr >> 3) * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(pid);
  return atomic_locks_[(h >> 20) % kAtomicStripes];
}

}  // namespace softrdma

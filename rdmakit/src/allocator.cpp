#include "rdmakit/allocator.hpp"

#include <sys/mman.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chunk_arena.hpp"
#include "pages.hpp"
#include "rdmakit/error.hpp"
#include "size_classes.hpp"
#include "thread_cache.hpp"

namespace rdmakit {

RawRegion::RawRegion(const ProtectionDomain& pd, size_t size, Access access) {
  std::error_code ec;
  *this = RawRegion(pd, size, access, ec);
  if (ec)
    throw_error(ec, "registered region of " + std::to_string(size) + " bytes with access " +
                        to_string(access));
}

RawRegion::RawRegion(const ProtectionDomain& pd, size_t size, Access access, std::error_code& ec) {
  RDMAKIT_REQUIRE(size > 0, "RawRegion of 0 bytes");
  const size_t length = detail::round_up_to_page(size);
  void* mapping = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) {
    ec = std::error_code(errno, std::system_category());
    return;
  }
  region_ = pd.register_memory(mapping, length, access, ec);
  if (ec) {
    munmap(mapping, length);
    return;
  }
  mapping_ = mapping;
  mapping_size_ = length;
}

RawRegion::RawRegion(RawRegion&& other) noexcept
    : mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_size_(std::exchange(other.mapping_size_, 0)),
      region_(std::move(other.region_)) {}

RawRegion& RawRegion::operator=(RawRegion&& other) noexcept {
  if (this != &other) {
    release();
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
    region_ = std::move(other.region_);
  }
  return *this;
}

RawRegion::~RawRegion() {
  release();
}

void RawRegion::release() noexcept {
  region_ = MemoryRegion();  // deregister before the pages go away
  if (mapping_) munmap(mapping_, mapping_size_);
  mapping_ = nullptr;
  mapping_size_ = 0;
}

namespace detail {
namespace {

// Arenas are indexed by the access bits: four IBV_ACCESS_* flags, sixteen sets.
constexpr size_t kAccessSets = static_cast<size_t>(Access::all) + 1;
static_assert(kAccessSets == 16, "Access holds four IBV_ACCESS_* bits");

constexpr size_t index_of(Access access) noexcept {
  return static_cast<size_t>(access);
}

constexpr size_t kPurposes = 3;
static_assert(static_cast<size_t>(Purpose::general) + 1 == kPurposes);

const char* to_string(Purpose purpose) noexcept {
  switch (purpose) {
    case Purpose::send:
      return "send";
    case Purpose::recv:
      return "recv";
    case Purpose::general:
      return "general";
  }
  return "?";
}

}  // namespace

class AllocatorState {
 public:
  AllocatorState(const ProtectionDomain& pd, const AllocatorOptions& options)
      : options_(options), pd_(&pd), classes_(options.chunk_size), id_(register_allocator()) {
    RDMAKIT_REQUIRE(within(options.allowed_access, Access::all),
                    "AllocatorOptions::allowed_access holds bits that are not Access rights");
    RDMAKIT_REQUIRE(within(options.default_access, options.allowed_access),
                    "AllocatorOptions::default_access is not within allowed_access");
    for (size_t bits = 0; bits < kAccessSets; ++bits) {
      const auto access = static_cast<Access>(bits);
      if (within(access, options.allowed_access))
        arenas_[bits] = std::make_unique<Arena>(pd, access, options.chunk_size, bytes_registered_);
    }
  }

  AllocatorState(const AllocatorState&) = delete;
  AllocatorState& operator=(const AllocatorState&) = delete;

  ~AllocatorState() {
    size_t in_use = 0;
    for (const std::atomic<size_t>& bytes : in_use_) in_use += bytes.load();
    if (in_use != 0)
      programming_error("MemoryAllocator destroyed while " + std::to_string(in_use) +
                        " bytes are still allocated (Allocations must go first)");
    // After this no exiting thread touches the arenas; bins other threads still hold for
    // this allocator are dropped unread.
    unregister_allocator(id_);
  }

  Allocation allocate(size_t size, Access access, Purpose purpose, Init init, std::error_code& ec) {
    RDMAKIT_REQUIRE(size > 0, "MemoryAllocator::allocate of 0 bytes");
    if (!within(access, options_.allowed_access)) {
      ec = std::make_error_code(std::errc::permission_denied);
      return {};
    }
    const bool dedicated = size > classes_.largest();
    const unsigned size_class = dedicated ? 0 : SizeClasses::class_of(size);
    const size_t bytes = dedicated ? round_up_to_page(size) : SizeClasses::block_size(size_class);
    if (!reserve(purpose, bytes)) {
      ec = Errc::budget_exhausted;
      return {};
    }
    Allocation result;
    if (dedicated) {
      auto region = std::make_unique<RawRegion>(*pd_, size, access, ec);
      if (ec) {
        unreserve(purpose, bytes);
        return {};
      }
      bytes_registered_.fetch_add(bytes, std::memory_order_relaxed);
      result.data_ = region->data();
      result.lkey_ = region->region().lkey();
      result.rkey_ = region->region().rkey();
      result.dedicated_ = std::move(region);
      // A fresh mapping is zero-filled already.
    } else {
      Arena& arena = *arenas_[index_of(access)];
      Block block{};
      if (!take_block(arena, size_class, block, ec)) {
        unreserve(purpose, bytes);
        return {};
      }
      result.arena_ = &arena;
      result.data_ = block.data;
      result.lkey_ = block.lkey;
      result.rkey_ = block.rkey;
      result.size_class_ = static_cast<uint8_t>(size_class);
      if (init == Init::zeroed) std::memset(block.data, 0, size);
    }
    result.owner_ = this;
    result.size_ = size;
    result.purpose_ = purpose;
    ec.clear();
    return result;
  }

  void release(Allocation& allocation) noexcept {
    if (allocation.dedicated_) {
      const size_t bytes = allocation.dedicated_->size();
      allocation.dedicated_.reset();
      bytes_registered_.fetch_sub(bytes, std::memory_order_relaxed);
      unreserve(allocation.purpose_, bytes);
      return;
    }
    give_block(*allocation.arena_, allocation.size_class_,
               Block{allocation.data_, allocation.lkey_, allocation.rkey_});
    unreserve(allocation.purpose_, SizeClasses::block_size(allocation.size_class_));
  }

  RawRegion raw_region(size_t size, Access access) const {
    if (!within(access, options_.allowed_access))
      throw_error(std::make_error_code(std::errc::permission_denied),
                  "MemoryAllocator::raw_region with access " + rdmakit::to_string(access) +
                      " (allowed: " + rdmakit::to_string(options_.allowed_access) + ")");
    return RawRegion(*pd_, size, access);
  }

  AllocatorStats stats() const {
    AllocatorStats stats;
    stats.bytes_registered = bytes_registered_.load(std::memory_order_relaxed);
    for (const auto& arena : arenas_)
      if (arena) arena->add_usage(stats);
    stats.bytes_in_use_send = in_use(Purpose::send).load(std::memory_order_relaxed);
    stats.bytes_in_use_recv = in_use(Purpose::recv).load(std::memory_order_relaxed);
    stats.bytes_in_use_general = in_use(Purpose::general).load(std::memory_order_relaxed);
    return stats;
  }

  std::string describe(size_t size, Access access, Purpose purpose) const {
    std::string text = "MemoryAllocator::allocate of " + std::to_string(size) + " bytes (" +
                       to_string(purpose) + ", " + rdmakit::to_string(access);
    const size_t budget = budget_of(purpose);
    if (budget != 0)
      text += ", budget " + std::to_string(budget) + " bytes with " +
              std::to_string(in_use(purpose).load(std::memory_order_relaxed)) + " in use";
    return text + ")";
  }

  const AllocatorOptions options_;

 private:
  std::atomic<size_t>& in_use(Purpose purpose) noexcept {
    return in_use_[static_cast<size_t>(purpose)];
  }
  const std::atomic<size_t>& in_use(Purpose purpose) const noexcept {
    return in_use_[static_cast<size_t>(purpose)];
  }
  size_t budget_of(Purpose purpose) const noexcept {
    switch (purpose) {
      case Purpose::send:
        return options_.send_budget;
      case Purpose::recv:
        return options_.recv_budget;
      case Purpose::general:
        break;
    }
    return 0;
  }

  // Counts `bytes` against the purpose's budget; false if they do not fit.
  bool reserve(Purpose purpose, size_t bytes) noexcept {
    std::atomic<size_t>& used = in_use(purpose);
    const size_t budget = budget_of(purpose);
    if (budget == 0) {
      used.fetch_add(bytes, std::memory_order_relaxed);
      return true;
    }
    size_t current = used.load(std::memory_order_relaxed);
    do {
      if (bytes > budget || current > budget - bytes) return false;
    } while (!used.compare_exchange_weak(current, current + bytes, std::memory_order_relaxed));
    return true;
  }
  void unreserve(Purpose purpose, size_t bytes) noexcept {
    in_use(purpose).fetch_sub(bytes, std::memory_order_relaxed);
  }

  // A block from this thread's bin, refilling the bin from the arena when it is empty.
  bool take_block(Arena& arena, unsigned size_class, Block& out, std::error_code& ec) {
    ThreadCache* cache = ThreadCache::current();
    if (!cache) {
      std::vector<Block> one;
      if (!arena.take(size_class, 1, one, ec)) return false;
      out = one.front();
      return true;
    }
    std::vector<Block>& bin = cache->bin(id_, &arena, size_class);
    if (bin.empty() &&
        !arena.take(size_class, bin_batch(SizeClasses::block_size(size_class)), bin, ec))
      return false;
    out = bin.back();
    bin.pop_back();
    return true;
  }

  // Puts a block in this thread's bin, moving the oldest ones to the arena when it is full.
  void give_block(Arena& arena, unsigned size_class, Block block) noexcept {
    ThreadCache* cache = ThreadCache::current();
    if (!cache) {
      arena.give_back(size_class, {&block, 1});
      return;
    }
    std::vector<Block>& bin = cache->bin(id_, &arena, size_class);
    const size_t block_size = SizeClasses::block_size(size_class);
    if (bin.size() >= bin_capacity(block_size)) {
      const auto batch = static_cast<std::ptrdiff_t>(bin_batch(block_size));
      arena.give_back(size_class, {bin.data(), bin.data() + batch});
      bin.erase(bin.begin(), bin.begin() + batch);
    }
    bin.push_back(block);
  }

  const ProtectionDomain* pd_;
  const SizeClasses classes_;
  const uint64_t id_;
  std::array<std::unique_ptr<Arena>, kAccessSets> arenas_;  // null where access is not allowed
  std::atomic<size_t> bytes_registered_{0};
  std::array<std::atomic<size_t>, kPurposes> in_use_{};
};

}  // namespace detail

Allocation::Allocation(Allocation&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      arena_(std::exchange(other.arena_, nullptr)),
      dedicated_(std::move(other.dedicated_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      lkey_(other.lkey_),
      rkey_(other.rkey_),
      size_class_(other.size_class_),
      purpose_(other.purpose_) {}

Allocation& Allocation::operator=(Allocation&& other) noexcept {
  if (this != &other) {
    release();
    owner_ = std::exchange(other.owner_, nullptr);
    arena_ = std::exchange(other.arena_, nullptr);
    dedicated_ = std::move(other.dedicated_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    lkey_ = other.lkey_;
    rkey_ = other.rkey_;
    size_class_ = other.size_class_;
    purpose_ = other.purpose_;
  }
  return *this;
}

Allocation::~Allocation() {
  release();
}

void Allocation::release() noexcept {
  if (!owner_) return;
  std::exchange(owner_, nullptr)->release(*this);
  arena_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

MemoryAllocator::MemoryAllocator(const ProtectionDomain& pd, const AllocatorOptions& options)
    : state_(std::make_unique<detail::AllocatorState>(pd, options)) {}

MemoryAllocator::MemoryAllocator(MemoryAllocator&&) noexcept = default;
MemoryAllocator& MemoryAllocator::operator=(MemoryAllocator&&) noexcept = default;
MemoryAllocator::~MemoryAllocator() = default;

namespace {
detail::AllocatorState& checked(const std::unique_ptr<detail::AllocatorState>& state) {
  RDMAKIT_REQUIRE(state != nullptr, "use of a moved-from rdmakit::MemoryAllocator");
  return *state;
}
}  // namespace

Allocation MemoryAllocator::allocate(size_t size, Purpose purpose, Init init) {
  return allocate(size, options().default_access, purpose, init);
}

Allocation MemoryAllocator::allocate(size_t size, Access access, Purpose purpose, Init init) {
  std::error_code ec;
  Allocation allocation = allocate(size, access, purpose, init, ec);
  if (ec) throw_error(ec, checked(state_).describe(size, access, purpose));
  return allocation;
}

Allocation MemoryAllocator::allocate(size_t size, Access access, Purpose purpose, Init init,
                                     std::error_code& ec) {
  return checked(state_).allocate(size, access, purpose, init, ec);
}

RawRegion MemoryAllocator::raw_region(size_t size, Access access) const {
  return checked(state_).raw_region(size, access);
}

AllocatorStats MemoryAllocator::stats() const {
  return checked(state_).stats();
}

const AllocatorOptions& MemoryAllocator::options() const {
  return checked(state_).options_;
}

}  // namespace rdmakit

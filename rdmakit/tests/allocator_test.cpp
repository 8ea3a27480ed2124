// MemoryAllocator on softrdma0: size classes, zeroing, keys, budgets, thread caches.
#include "rdmakit/allocator.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "loopback_pair.hpp"

namespace rdmakit {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;

constexpr size_t kSmallChunk = size_t{64} << 10;

AllocatorOptions small_chunks(Access default_access = Access::local_write) {
  AllocatorOptions options;
  options.chunk_size = kSmallChunk;
  options.default_access = default_access;
  return options;
}

size_t in_use(const AllocatorStats& stats) {
  return stats.bytes_in_use_send + stats.bytes_in_use_recv + stats.bytes_in_use_general;
}

TEST(Allocator, BlocksAreZeroedByDefault) {
  testing::LoopbackPair pair;
  MemoryAllocator allocator(pair.pd);
  std::byte* first = nullptr;
  {
    Allocation dirty = allocator.allocate(1000);
    first = dirty.data();
    std::memset(dirty.data(), 0xab, dirty.size());
  }
  Allocation again = allocator.allocate(1000);
  ASSERT_EQ(again.data(), first) << "the thread cache hands the freed block out first";
  EXPECT_THAT(std::vector<std::byte>(again.data(), again.data() + again.size()),
              Each(std::byte{0}));
}

TEST(Allocator, UninitializedBlocksKeepTheirOldContents) {
  testing::LoopbackPair pair;
  MemoryAllocator allocator(pair.pd);
  std::byte* first = nullptr;
  {
    Allocation dirty = allocator.allocate(1000);
    first = dirty.data();
    std::memset(dirty.data(), 0xab, dirty.size());
  }
  Allocation again = allocator.allocate(1000, Purpose::recv, Init::uninitialized);
  ASSERT_EQ(again.data(), first);
  EXPECT_THAT(std::vector<std::byte>(again.data(), again.data() + again.size()),
              Each(std::byte{0xab}));
}

TEST(Allocator, BlocksCarryTheKeysOfTheirChunkAndRdmaLandsInThem) {
  testing::LoopbackPair pair;
  MemoryAllocator allocator(pair.pd, small_chunks(Access::all));
  constexpr size_t kBlock = kSmallChunk / 4;  // the largest class: four per chunk
  std::vector<Allocation> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(allocator.allocate(kBlock));
  EXPECT_EQ(allocator.stats().bytes_registered, 2 * kSmallChunk);

  // Blocks sharing keys lie inside one chunk: one registration per chunk.
  std::map<std::pair<uint32_t, uint32_t>, std::vector<std::byte*>> by_keys;
  for (const Allocation& block : blocks)
    by_keys[{block.buffer().lkey(), block.remote().rkey()}].push_back(block.data());
  ASSERT_EQ(by_keys.size(), 2u);
  for (auto& [keys, addresses] : by_keys) {
    ASSERT_EQ(addresses.size(), 4u);
    const auto [low, high] = std::minmax_element(addresses.begin(), addresses.end());
    EXPECT_LT(static_cast<size_t>(*high - *low), kSmallChunk);
  }

  // The peer's RDMA WRITE through each block's rkey lands in that block.
  Allocation source = allocator.allocate(kBlock);
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::memset(source.data(), static_cast<int>(i + 1), source.size());
    ASSERT_EQ(testing::one_sided(pair.a, pair.cq_a, IBV_WR_RDMA_WRITE, source.buffer(),
                                 blocks[i].remote()),
              IBV_WC_SUCCESS);
    EXPECT_THAT(std::vector<std::byte>(blocks[i].data(), blocks[i].data() + kBlock),
                Each(static_cast<std::byte>(i + 1)));
  }
}

TEST(Allocator, BudgetsArePerPurposeAndCountWholeBlocks) {
  testing::LoopbackPair pair;
  AllocatorOptions options;
  options.send_budget = 4096;
  options.recv_budget = 2048;
  MemoryAllocator allocator(pair.pd, options);

  std::vector<Allocation> sends;
  for (int i = 0; i < 4; ++i) sends.push_back(allocator.allocate(1000, Purpose::send));
  EXPECT_EQ(allocator.stats().bytes_in_use_send, 4096u);  // 1000 rounds up to a 1024 block
  try {
    allocator.allocate(64, Purpose::send);
    FAIL() << "allocated beyond the send budget";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::budget_exhausted);
    EXPECT_THAT(e.what(), HasSubstr("send"));
    EXPECT_THAT(e.what(), HasSubstr("budget 4096 bytes with 4096 in use"));
  }
  std::error_code ec;
  Allocation refused = allocator.allocate(64, Access::local_write, Purpose::send, Init::zeroed, ec);
  EXPECT_EQ(ec, Errc::budget_exhausted);
  EXPECT_FALSE(refused);

  // The receive budget is separate, and general allocations have none.
  Allocation recv1 = allocator.allocate(2048, Purpose::recv);
  allocator.allocate(64, Access::local_write, Purpose::recv, Init::zeroed, ec);
  EXPECT_EQ(ec, Errc::budget_exhausted);
  Allocation general = allocator.allocate(size_t{1} << 20);
  EXPECT_TRUE(general);

  // Freeing (including through a move) gives the budget back, once.
  Allocation moved = std::move(sends.back());
  sends.pop_back();
  moved = Allocation();
  EXPECT_EQ(allocator.stats().bytes_in_use_send, 3072u);
  Allocation again = allocator.allocate(1024, Access::local_write, Purpose::send, Init::zeroed, ec);
  EXPECT_FALSE(ec);
  EXPECT_TRUE(again);
}

TEST(Allocator, RightsBeyondTheAllowedOnesAreARuntimeError) {
  testing::LoopbackPair pair;
  AllocatorOptions options;
  options.allowed_access = Access::local_write | Access::remote_read;
  MemoryAllocator allocator(pair.pd, options);
  try {
    allocator.allocate(64, Access::all);
    FAIL() << "allocated with rights the allocator does not allow";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), std::errc::permission_denied);
  }
  std::error_code ec;
  EXPECT_FALSE(allocator.allocate(64, Access::remote_write, Purpose::general, Init::zeroed, ec));
  EXPECT_EQ(ec, std::errc::permission_denied);
  EXPECT_THROW(allocator.raw_region(4096, Access::all), Error);
  EXPECT_TRUE(allocator.allocate(64, Access::local_write | Access::remote_read));
  EXPECT_EQ(in_use(allocator.stats()), 0u);
}

TEST(Allocator, LargeRequestsGetARegistrationOfTheirOwn) {
  testing::LoopbackPair pair;
  MemoryAllocator allocator(pair.pd, small_chunks(Access::all));
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t size = 100000;  // above kSmallChunk / 4
  Allocation source = allocator.allocate(4096);
  std::memset(source.data(), 0x5a, source.size());
  const size_t chunks = allocator.stats().bytes_registered;
  {
    Allocation large = allocator.allocate(size, Purpose::recv);
    const size_t mapped = (size + page - 1) / page * page;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(large.data()) % page, 0u);
    EXPECT_EQ(large.size(), size);
    EXPECT_EQ(allocator.stats().bytes_registered, chunks + mapped);
    EXPECT_EQ(allocator.stats().bytes_in_use_recv, mapped);
    EXPECT_THAT(std::vector<std::byte>(large.data(), large.data() + size), Each(std::byte{0}));
    ASSERT_EQ(testing::one_sided(pair.a, pair.cq_a, IBV_WR_RDMA_WRITE, source.buffer(),
                                 large.remote().last(4096)),
              IBV_WC_SUCCESS);
    EXPECT_THAT(std::vector<std::byte>(large.data() + size - 4096, large.data() + size),
                Each(std::byte{0x5a}));
  }
  // The dedicated mapping goes with its allocation; chunks stay.
  EXPECT_EQ(allocator.stats().bytes_registered, chunks);
  EXPECT_EQ(allocator.stats().bytes_in_use_recv, 0u);
}

TEST(Allocator, RawRegionsArePageAlignedAndOutsideTheStatistics) {
  testing::LoopbackPair pair;
  MemoryAllocator allocator(pair.pd);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  RawRegion raw = allocator.raw_region(page + 1, Access::all);
  EXPECT_EQ(raw.size(), 2 * page);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(raw.data()) % page, 0u);
  EXPECT_EQ(raw.region().access(), Access::all);
  EXPECT_EQ(allocator.stats().bytes_registered, 0u);
  RawRegion moved = std::move(raw);
  EXPECT_FALSE(raw);  // NOLINT(bugprone-use-after-move): a moved-from region is empty
  EXPECT_EQ(moved.local().size(), 2 * page);
}

// Checks the blocks of two arenas that one thread allocates and frees in turn: each block
// must come back with the keys and rights of the arena it was asked from.
void expect_arenas_never_mix(testing::LoopbackPair& pair, const std::function<Allocation()>& local,
                             const std::function<Allocation()>& remote_writable) {
  std::set<uint32_t> local_keys, remote_keys;
  std::set<std::byte*> local_blocks, remote_blocks;
  for (int round = 0; round < 4; ++round) {
    std::vector<Allocation> locals, remotes;
    for (int i = 0; i < 100; ++i) {
      locals.push_back(local());
      remotes.push_back(remote_writable());
    }
    for (const Allocation& a : locals) {
      local_keys.insert(a.buffer().lkey());
      local_blocks.insert(a.data());
    }
    for (const Allocation& a : remotes) {
      remote_keys.insert(a.buffer().lkey());
      remote_blocks.insert(a.data());
    }
    // Free interleaved, so both arenas' blocks pass through the thread's caches together.
    for (size_t i = 0; i < locals.size(); ++i) {
      locals[i] = Allocation();
      remotes[i] = Allocation();
    }
  }
  EXPECT_EQ(local_keys.size(), 1u);  // 100 blocks of 64 bytes: one chunk each
  EXPECT_EQ(remote_keys.size(), 1u);
  EXPECT_NE(*local_keys.begin(), *remote_keys.begin());
  std::vector<std::byte*> shared;
  std::set_intersection(local_blocks.begin(), local_blocks.end(), remote_blocks.begin(),
                        remote_blocks.end(), std::back_inserter(shared));
  EXPECT_TRUE(shared.empty()) << shared.size() << " blocks were handed out by both arenas";

  // A block that came from the local-only arena would refuse the peer's WRITE.
  Allocation target = remote_writable();
  Allocation source = local();
  std::memset(source.data(), 0x77, source.size());
  ASSERT_EQ(
      testing::one_sided(pair.a, pair.cq_a, IBV_WR_RDMA_WRITE, source.buffer(), target.remote()),
      IBV_WC_SUCCESS);
  EXPECT_THAT(std::vector<std::byte>(target.data(), target.data() + target.size()),
              Each(std::byte{0x77}));
}

TEST(Allocator, TwoAllocatorsOnOneThreadNeverMixTheirBlocks) {
  testing::LoopbackPair pair;
  MemoryAllocator local(pair.pd, AllocatorOptions{});
  AllocatorOptions options;
  options.default_access = Access::all;
  MemoryAllocator remote(pair.pd, options);
  expect_arenas_never_mix(
      pair, [&] { return local.allocate(64); }, [&] { return remote.allocate(64); });
  EXPECT_EQ(in_use(local.stats()), 0u);
  EXPECT_EQ(in_use(remote.stats()), 0u);
}

TEST(Allocator, TwoAccessSetsOfOneAllocatorNeverMixTheirBlocks) {
  testing::LoopbackPair pair;
  MemoryAllocator allocator(pair.pd);
  expect_arenas_never_mix(
      pair, [&] { return allocator.allocate(64, Access::local_write); },
      [&] { return allocator.allocate(64, Access::all); });
}

TEST(Allocator, ConcurrentThreadsNeverShareABlock) {
  testing::LoopbackPair pair;
  MemoryAllocator allocator(pair.pd, small_chunks());
  constexpr int kThreads = 4;
  constexpr int kOperations = 10000;
  constexpr size_t kWindow = 32;
  std::atomic<int> failures{0};
  auto work = [&](uint64_t thread) {
    std::minstd_rand rng(static_cast<uint32_t>(thread + 1));
    std::vector<std::pair<Allocation, uint64_t>> live;  // allocation and the tag written in it
    auto tag_at = [](const Allocation& a, size_t offset) {
      uint64_t tag;
      std::memcpy(&tag, a.data() + offset, sizeof tag);
      return tag;
    };
    auto free_one = [&](size_t index) {
      const Allocation& a = live[index].first;
      if (tag_at(a, 0) != live[index].second || tag_at(a, a.size() - 8) != live[index].second)
        ++failures;
      live[index] = std::move(live.back());
      live.pop_back();
    };
    for (int op = 0; op < kOperations; ++op) {
      if (live.size() == kWindow || (!live.empty() && rng() % 2 == 0)) {
        free_one(rng() % live.size());
        continue;
      }
      const size_t size = 16 + rng() % 8192;  // room for two tags; classes up to 16 KiB
      const Access access = rng() % 2 ? Access::local_write : Access::all;
      const auto purpose = static_cast<Purpose>(rng() % 3);
      Allocation a = allocator.allocate(size, access, purpose);
      if (tag_at(a, 0) != 0 || tag_at(a, a.size() - 8) != 0) ++failures;  // zeroed
      const uint64_t tag = thread << 32 | static_cast<uint64_t>(op);
      std::memcpy(a.data(), &tag, sizeof tag);
      std::memcpy(a.data() + a.size() - 8, &tag, sizeof tag);
      live.emplace_back(std::move(a), tag);
    }
    while (!live.empty()) free_one(0);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(work, static_cast<uint64_t>(t));
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  const AllocatorStats stats = allocator.stats();
  EXPECT_EQ(in_use(stats), 0u);
  EXPECT_EQ(stats.bytes_free_in_arenas, stats.bytes_carved) << "every thread cache was flushed";
}

TEST(Allocator, ThreadExitGivesItsCachedBlocksBack) {
  testing::LoopbackPair pair;
  MemoryAllocator allocator(pair.pd);
  std::promise<void> cached, exit;
  std::thread thread([&] {
    {
      std::vector<Allocation> blocks;
      for (int i = 0; i < 10; ++i) blocks.push_back(allocator.allocate(64));
    }
    cached.set_value();
    exit.get_future().wait();
  });
  cached.get_future().wait();
  AllocatorStats stats = allocator.stats();
  EXPECT_EQ(in_use(stats), 0u);
  EXPECT_GT(stats.bytes_carved, 0u);
  EXPECT_EQ(stats.bytes_free_in_arenas, 0u) << "the freed blocks wait in the thread's cache";
  exit.set_value();
  thread.join();
  stats = allocator.stats();
  EXPECT_EQ(stats.bytes_free_in_arenas, stats.bytes_carved);
  // This thread reuses them rather than cutting new blocks.
  Allocation reused = allocator.allocate(64);
  EXPECT_EQ(allocator.stats().bytes_carved, stats.bytes_carved);
}

TEST(Allocator, CacheOfADestroyedAllocatorIsDroppedUnread) {
  testing::LoopbackPair pair;
  MemoryAllocator survivor(pair.pd);
  auto doomed = std::make_unique<MemoryAllocator>(pair.pd);
  std::promise<void> cached, destroyed;
  std::thread thread([&] {
    // Freed at once: both blocks wait in this thread's cache.
    doomed->allocate(64);
    survivor.allocate(64);
    cached.set_value();
    destroyed.get_future().wait();
    // A new bin drops the dead allocator's; at exit only the survivor's bins are flushed.
    // (ASan reports it if either touches the dead allocator's arenas.)
    survivor.allocate(128);
  });
  cached.get_future().wait();
  doomed.reset();
  destroyed.set_value();
  thread.join();
  const AllocatorStats stats = survivor.stats();
  EXPECT_EQ(in_use(stats), 0u);
  EXPECT_EQ(stats.bytes_free_in_arenas, stats.bytes_carved);
}

TEST(Allocator, MovingTheAllocatorKeepsItsAllocationsValid) {
  testing::LoopbackPair pair;
  MemoryAllocator original(pair.pd);
  Allocation block = original.allocate(100);
  MemoryAllocator moved = std::move(original);
  block = Allocation();
  EXPECT_EQ(in_use(moved.stats()), 0u);
}

using AllocatorDeathTest = ::testing::Test;

TEST(AllocatorDeathTest, DestroyingTheAllocatorBeforeItsAllocationsStops) {
  testing::LoopbackPair pair;
  EXPECT_DEATH(
      {
        auto allocator = std::make_unique<MemoryAllocator>(pair.pd);
        Allocation block = allocator->allocate(100);
        allocator.reset();
      },
      "MemoryAllocator destroyed while 128 bytes are still allocated");
}

TEST(AllocatorDeathTest, ZeroBytesOrABadChunkSizeStop) {
  testing::LoopbackPair pair;
  MemoryAllocator allocator(pair.pd);
  EXPECT_DEATH(allocator.allocate(0), "allocate of 0 bytes");
  AllocatorOptions options;
  options.chunk_size = 3 << 20;
  EXPECT_DEATH(MemoryAllocator(pair.pd, options), "chunk_size must be a power of two");
}

}  // namespace
}  // namespace rdmakit

// RegistrationCache on softrdma0: hits, LRU eviction, invalidation, and the kinds of memory
// users bring (heap buffers, mmap'd files, hugepages).
#include "rdmakit/registration_cache.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "loopback_pair.hpp"

namespace rdmakit {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// Anonymous memory of `pages` pages, unmapped at the end of the test.
struct Pages {
  explicit Pages(size_t pages, int extra_flags = 0)
      : size(pages * kPage),
        data(static_cast<std::byte*>(mmap(nullptr, size, PROT_READ | PROT_WRITE,
                                          MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0))) {}
  ~Pages() {
    if (ok()) munmap(data, size);
  }
  bool ok() const { return data != MAP_FAILED; }
  std::byte* page(size_t index) const { return data + index * kPage; }

  size_t size;
  std::byte* data;
};

// Writes `count` bytes of `value` into `target` from a source registered through `cache`
// (and invalidated again before it is unmapped); true on success.
bool write_pattern(testing::LoopbackPair& pair, RegistrationCache& cache,
                   const RemoteBuffer& target, size_t count, std::byte value) {
  Pages source((count + kPage - 1) / kPage);
  if (!source.ok()) return false;
  std::memset(source.data, static_cast<int>(value), count);
  bool written = false;
  {
    CachedRegistration registered = cache.acquire(source.data, count, Access::local_write);
    written = testing::one_sided(pair.a, pair.cq_a, IBV_WR_RDMA_WRITE, registered.buffer(),
                                 target.first(count)) == IBV_WC_SUCCESS;
  }
  cache.invalidate(source.data, source.size);
  return written;
}

TEST(RegistrationCache, ReusesARegistrationThatCoversTheRangeWithEnoughRights) {
  testing::LoopbackPair pair;
  RegistrationCache cache(pair.pd, size_t{64} << 20);
  // Page-aligned heap memory: softrdma moves the pages of a registration onto shared memory,
  // which must not race with writes by other users of those pages.
  constexpr size_t kHeapBytes = size_t{1} << 20;
  std::unique_ptr<std::byte[], void (*)(void*)> heap_memory(
      static_cast<std::byte*>(std::aligned_alloc(kPage, kHeapBytes)), &std::free);
  ASSERT_NE(heap_memory, nullptr);
  std::span<std::byte> heap(heap_memory.get(), kHeapBytes);
  std::memset(heap.data(), 0, heap.size());
  uint32_t whole_key = 0;
  {
    CachedRegistration whole = cache.acquire(heap.data(), heap.size(), Access::local_write);
    whole_key = whole.buffer().lkey();
    EXPECT_EQ(whole.buffer().data(), heap.data());
    EXPECT_EQ(whole.buffer().size(), heap.size());
  }
  CachedRegistration part = cache.acquire(heap.data() + 5000, 3000, Access::local_write);
  EXPECT_EQ(part.buffer().lkey(), whole_key);
  EXPECT_EQ(part.buffer().data(), heap.data() + 5000);
  EXPECT_EQ(part.buffer().size(), 3000u);
  RegistrationCacheStats stats = cache.stats();
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.hits, 1u);

  // Wider rights need a registration of their own, which then serves the peer.
  CachedRegistration writable = cache.acquire(heap.data() + 5000, 3000, Access::all);
  EXPECT_NE(writable.buffer().lkey(), whole_key);
  stats = cache.stats();
  EXPECT_EQ(stats.misses, 2u);
  EXPECT_EQ(stats.registrations, 2u);
  ASSERT_TRUE(write_pattern(pair, cache, writable.remote(), 3000, std::byte{0x42}));
  EXPECT_THAT(std::vector<std::byte>(heap.begin() + 5000, heap.begin() + 8000),
              Each(std::byte{0x42}));
  EXPECT_EQ(heap[4999], std::byte{0});
  EXPECT_EQ(heap[8000], std::byte{0});
}

TEST(RegistrationCache, RegistersWholePages) {
  testing::LoopbackPair pair;
  RegistrationCache cache(pair.pd, size_t{1} << 20);
  Pages pages(4);
  ASSERT_TRUE(pages.ok());
  { CachedRegistration middle = cache.acquire(pages.page(1) + 100, 10, Access::local_write); }
  EXPECT_EQ(cache.stats().bytes_registered, kPage);
  // Anything else on that page hits; the next page does not.
  { CachedRegistration same_page = cache.acquire(pages.page(1), kPage, Access::local_write); }
  {
    CachedRegistration next_page = cache.acquire(pages.page(1) + kPage - 1, 2, Access::local_write);
  }
  const RegistrationCacheStats stats = cache.stats();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 2u);
  EXPECT_EQ(stats.bytes_registered, 3 * kPage);
}

TEST(RegistrationCache, EvictsTheLeastRecentlyUsedOfTheUnheldRegistrations) {
  testing::LoopbackPair pair;
  RegistrationCache cache(pair.pd, 2 * kPage);
  Pages pages(8);
  ASSERT_TRUE(pages.ok());
  auto touch = [&](size_t page) { cache.acquire(pages.page(page), kPage, Access::local_write); };
  touch(0);
  touch(1);
  touch(2);  // three pages registered, two allowed: page 0 goes
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.stats().registrations, 2u);
  touch(1);  // a hit: page 1 becomes the most recently used
  touch(3);  // so page 2 goes
  EXPECT_EQ(cache.stats().evictions, 2u);
  const uint64_t misses = cache.stats().misses;
  touch(1);
  EXPECT_EQ(cache.stats().misses, misses) << "page 1 was kept";
  touch(2);
  EXPECT_EQ(cache.stats().misses, misses + 1) << "page 2 was evicted";

  // Held registrations are never evicted, whatever the capacity.
  std::vector<CachedRegistration> held;
  for (size_t page = 4; page < 8; ++page)
    held.push_back(cache.acquire(pages.page(page), kPage, Access::local_write));
  RegistrationCacheStats stats = cache.stats();
  EXPECT_EQ(stats.registrations, 4u);
  EXPECT_EQ(stats.bytes_registered, 4 * kPage);
  held.clear();
  stats = cache.stats();
  EXPECT_EQ(stats.registrations, 2u);
  EXPECT_EQ(stats.bytes_registered, 2 * kPage);
}

TEST(RegistrationCache, InvalidateDropsIdleRegistrationsAndRetiresHeldOnes) {
  testing::LoopbackPair pair;
  RegistrationCache cache(pair.pd, size_t{1} << 20);
  Pages pages(4);
  ASSERT_TRUE(pages.ok());
  { CachedRegistration idle = cache.acquire(pages.page(0), kPage, Access::local_write); }
  CachedRegistration held = cache.acquire(pages.page(1), 2 * kPage, Access::all);
  { CachedRegistration other = cache.acquire(pages.page(3), kPage, Access::local_write); }
  ASSERT_EQ(cache.stats().registrations, 3u);

  cache.invalidate(pages.page(0), 2 * kPage);  // overlaps the first two, not the last
  RegistrationCacheStats stats = cache.stats();
  EXPECT_EQ(stats.registrations, 2u) << "the idle one is gone, the held one waits";
  // The held registration still works until it is released...
  ASSERT_TRUE(write_pattern(pair, cache, held.remote(), 64, std::byte{0x11}));
  EXPECT_EQ(pages.page(1)[63], std::byte{0x11});
  // ...but is not found again: a new acquire registers afresh.
  const uint64_t misses = cache.stats().misses;
  CachedRegistration fresh = cache.acquire(pages.page(1), kPage, Access::all);
  EXPECT_EQ(cache.stats().misses, misses + 1);
  EXPECT_NE(fresh.buffer().lkey(), held.buffer().lkey());
  held = CachedRegistration();
  stats = cache.stats();
  EXPECT_EQ(stats.registrations, 2u);  // the fresh one and the page 3 one
  { CachedRegistration other = cache.acquire(pages.page(3), kPage, Access::local_write); }
  EXPECT_EQ(cache.stats().misses, misses + 1) << "page 3 was not invalidated";
}

TEST(RegistrationCache, WorksWithAMappedFile) {
  testing::LoopbackPair pair;
  RegistrationCache cache(pair.pd, size_t{1} << 20);
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::tmpfile(), &std::fclose);
  ASSERT_NE(file, nullptr);
  const int fd = fileno(file.get());
  const size_t size = 16 * kPage;
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
  void* mapping = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(mapping, MAP_FAILED);
  auto* data = static_cast<std::byte*>(mapping);

  {
    CachedRegistration target = cache.acquire(data + 3 * kPage + 10, 5000, Access::all);
    ASSERT_TRUE(write_pattern(pair, cache, target.remote(), 5000, std::byte{0x5e}));
  }
  // The peer's write reached the file itself.
  std::vector<std::byte> from_file(5000);
  ASSERT_EQ(pread(fd, from_file.data(), from_file.size(), static_cast<off_t>(3 * kPage + 10)),
            static_cast<ssize_t>(from_file.size()));
  EXPECT_THAT(from_file, Each(std::byte{0x5e}));

  cache.invalidate(data, size);
  const size_t registrations = cache.stats().registrations;
  munmap(mapping, size);
  EXPECT_EQ(registrations, 0u);
}

TEST(RegistrationCache, WorksWithHugepages) {
  constexpr size_t kHugePage = size_t{2} << 20;
  void* mapping = mmap(nullptr, kHugePage, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
  if (mapping == MAP_FAILED) GTEST_SKIP() << "no hugepages: " << std::strerror(errno);
  std::unique_ptr<void, void (*)(void*)> unmap(mapping, [](void* p) { munmap(p, kHugePage); });
  testing::LoopbackPair pair;
  RegistrationCache cache(pair.pd, size_t{64} << 20);
  auto* data = static_cast<std::byte*>(mapping);
  CachedRegistration whole = cache.acquire(data, kHugePage, Access::all);
  CachedRegistration part = cache.acquire(data + kHugePage / 2, 4096, Access::all);
  EXPECT_EQ(part.buffer().lkey(), whole.buffer().lkey());
  ASSERT_TRUE(write_pattern(pair, cache, part.remote(), 4096, std::byte{0x33}));
  EXPECT_EQ(data[kHugePage / 2 + 4095], std::byte{0x33});
  whole = CachedRegistration();
  part = CachedRegistration();
  cache.invalidate(data, kHugePage);
}

TEST(RegistrationCache, FailureToRegisterIsReported) {
  testing::LoopbackPair pair;
  RegistrationCache cache(pair.pd, size_t{1} << 20);
  // Memory that cannot be accessed (and, being reserved, cannot be reused meanwhile).
  void* reserved = mmap(nullptr, kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(reserved, MAP_FAILED);
  try {
    cache.acquire(reserved, 100, Access::local_write);
    FAIL() << "registered inaccessible memory";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("RegistrationCache::acquire of"));
    EXPECT_EQ(e.code().category(), verbs_category());
  }
  std::error_code ec;
  EXPECT_FALSE(cache.acquire(reserved, 100, Access::local_write, ec));
  EXPECT_TRUE(ec);
  EXPECT_EQ(cache.stats().registrations, 0u);
  munmap(reserved, kPage);
}

TEST(RegistrationCache, ThreadsShareTheCache) {
  testing::LoopbackPair pair;
  RegistrationCache cache(pair.pd, 4 * kPage);
  Pages pages(8);
  ASSERT_TRUE(pages.ok());
  constexpr int kThreads = 4;
  constexpr size_t kAcquires = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < kAcquires; ++i) {
        const size_t page = (i * 3 + static_cast<size_t>(t)) % 8;
        CachedRegistration r = cache.acquire(pages.page(page) + 8, 100, Access::local_write);
        EXPECT_EQ(r.buffer().data(), pages.page(page) + 8);
      }
    });
  for (std::thread& t : threads) t.join();
  const RegistrationCacheStats stats = cache.stats();
  EXPECT_EQ(stats.hits + stats.misses, kThreads * kAcquires);
  EXPECT_GT(stats.evictions, 0u);
  EXPECT_LE(stats.bytes_registered, 4 * kPage);
}

using RegistrationCacheDeathTest = ::testing::Test;

TEST(RegistrationCacheDeathTest, DestroyingTheCacheWhileARegistrationIsHeldStops) {
  testing::LoopbackPair pair;
  Pages pages(1);
  ASSERT_TRUE(pages.ok());
  EXPECT_DEATH(
      {
        auto cache = std::make_unique<RegistrationCache>(pair.pd, kPage);
        CachedRegistration held = cache->acquire(pages.data, 10, Access::local_write);
        cache.reset();
      },
      "RegistrationCache destroyed while a CachedRegistration");
}

}  // namespace
}  // namespace rdmakit

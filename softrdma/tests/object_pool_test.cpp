// The pool that the objects of a connection come from (common/object_pool.*), on its own.
#include "common/object_pool.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

namespace softrdma {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kPoolInUse = false;  // the pool hands everything to the heap for the sanitizers
#else
constexpr bool kPoolInUse = true;
#endif

bool aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kPoolAlign == 0;
}

TEST(ObjectPool, ObjectsAreAlignedAndDoNotOverlapAcrossManyChunks) {
  // 1152 bytes is about a QP: several thousand of them span many 64 KiB chunks.
  constexpr size_t kBytes = 1152;
  std::vector<unsigned char*> objects;
  for (int i = 0; i < 4000; ++i) {
    auto* p = static_cast<unsigned char*>(pool_allocate(kBytes));
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(aligned(p));
    std::memset(p, i & 0xff, kBytes);
    objects.push_back(p);
  }
  for (size_t i = 0; i < objects.size(); ++i) {
    for (size_t b = 0; b < kBytes; b += 97)
      ASSERT_EQ(objects[i][b], i & 0xff) << "object " << i << " was overwritten at byte " << b;
  }
  for (unsigned char* p : objects) pool_release(p);
}

TEST(ObjectPool, AFreedObjectIsReusedForTheSameSize) {
  if (!kPoolInUse) GTEST_SKIP() << "built with a sanitizer: objects come from the heap";
  void* first = pool_allocate(448);
  void* other_size = pool_allocate(1000);
  pool_release(first);
  void* again = pool_allocate(448);
  EXPECT_EQ(again, first);
  pool_release(again);
  pool_release(other_size);
}

TEST(ObjectPool, LargeObjectsComeFromTheHeapAndGoBack) {
  void* big = pool_allocate(kPooledMost + 1);
  ASSERT_NE(big, nullptr);
  EXPECT_TRUE(aligned(big));
  std::memset(big, 0xab, kPooledMost + 1);
  pool_release(big);
  pool_release(nullptr);  // ignored, as delete of a null pointer
}

struct Throws : Pooled<Throws> {
  explicit Throws(bool fail) {
    if (fail) throw std::runtime_error("constructor failed");
  }
  char payload[200];
};

TEST(ObjectPool, AConstructorThatThrowsGivesItsMemoryBack) {
  if (!kPoolInUse) GTEST_SKIP() << "built with a sanitizer: objects come from the heap";
  auto* kept = new Throws(false);
  delete kept;  // its slot heads the free list of its size
  EXPECT_THROW(new Throws(true), std::runtime_error);
  auto* next = new (std::nothrow) Throws(false);
  EXPECT_EQ(next, kept) << "the failed construction's slot was not given back";
  delete next;
}

TEST(ObjectPool, ThreadsAllocateAndReleaseAtOnce) {
  auto churn = [](unsigned char tag) {
    std::vector<unsigned char*> held;
    for (int round = 0; round < 2000; ++round) {
      auto* p = static_cast<unsigned char*>(pool_allocate(64 + (round % 8) * 100));
      ASSERT_NE(p, nullptr);
      p[0] = tag;
      held.push_back(p);
      if (held.size() == 16) {
        for (unsigned char* h : held) {
          ASSERT_EQ(h[0], tag) << "another thread was handed the same object";
          pool_release(h);
        }
        held.clear();
      }
    }
    for (unsigned char* h : held) pool_release(h);
  };
  std::thread a(churn, 1), b(churn, 2);
  a.join();
  b.join();
}

TEST(ObjectPool, AChildForkedWhileAnotherThreadAllocatesCanAllocate) {
  struct Busy {  // stopped and joined however the test ends
    std::atomic<bool> stop{false};
    std::thread thread{[this] {
      while (!stop.load()) pool_release(pool_allocate(512));
    }};
    ~Busy() {
      stop = true;
      thread.join();
    }
  } busy;
  for (int i = 0; i < 20; ++i) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      alarm(10);  // a pool left locked by the fork would hang here: the alarm ends it
      void* p = pool_allocate(512);
      pool_release(p);
      _exit(p ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the child could not allocate (status " << status << ")";
  }
}

}  // namespace
}  // namespace softrdma

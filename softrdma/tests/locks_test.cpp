// The locks of common/ on their own. ProcessLock: the cross-process lock whose unlock is a
// plain store made safe by its waiters' heavy fence (common/asymmetric_fence.hpp); threads of
// several processes contend on one lock in shared memory, so waiters sleep and are woken.
// BiasedLock: taken without a locked instruction by its first thread until another thread
// wants it; the hand-over (revoking the bias) must keep both out of each other's way.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <thread>
#include <vector>

#include "common/asymmetric_fence.hpp"
#include "common/biased_lock.hpp"
#include "common/process_lock.hpp"

namespace {

using softrdma::BiasedLock;
using softrdma::ProcessLock;
using softrdma::ProcessLockGuard;
using softrdma::SharedBiasedLock;

// A forked child is killed by then whatever happens; the parent reaps it.
constexpr unsigned kChildAlarmSeconds = 20;

struct Shared {
  ProcessLock lock;
  uint64_t counter;   // guarded by lock, deliberately not atomic
  uint64_t inside;    // threads inside the critical section: never more than one
  uint64_t overlaps;  // times a thread found another inside
};

// Tests whose critical sections are shared with forked children.
class ForkingTest : public ::testing::Test {
 protected:
  // Forks a child running `body`, which returns its exit status.
  template <class Body>
  pid_t Fork(Body body) {
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(kChildAlarmSeconds);
      _exit(body());
    }
    return pid;
  }
  static int ExitStatus(pid_t pid) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  // Waits until the child has exited, without reaping it: a zombie until ExitStatus.
  static bool ExitedUnreaped(pid_t pid) {
    siginfo_t info{};
    return waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) == 0;
  }
  // Runs `take` (which takes a lock the zombie `child` held) on a thread of its own: true if
  // it returned within a few seconds while the child was still unreaped. The child is
  // reaped either way, which lets a `take` that waited for it go on.
  template <class Take>
  static bool TakenFromAZombie(pid_t child, Take take) {
    auto taken = std::async(std::launch::async, take);
    const bool in_time = taken.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
    ExitStatus(child);
    taken.get();
    return in_time;
  }
};

class ProcessLockTest : public ForkingTest {
 protected:
  void SetUp() override {
    void* p =
        mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    shared_ = static_cast<Shared*>(p);  // zero-filled: an unlocked lock
  }
  void TearDown() override { munmap(shared_, sizeof(Shared)); }

  // `threads` threads each take the lock `rounds` times.
  void Hammer(int threads, uint64_t rounds) {
    std::vector<std::thread> all;
    for (int t = 0; t < threads; ++t)
      all.emplace_back([this, rounds] {
        for (uint64_t i = 0; i < rounds; ++i) {
          ProcessLockGuard guard(shared_->lock);
          if (shared_->inside++ != 0) ++shared_->overlaps;
          ++shared_->counter;
          // Sometimes hold it long enough for the others to go to sleep on it.
          if (i % 1024 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
          --shared_->inside;
        }
      });
    for (std::thread& t : all) t.join();
  }

  Shared* shared_ = nullptr;
};

TEST_F(ProcessLockTest, ThreadsOfSeveralProcessesLoseNoUpdate) {
  constexpr int kProcesses = 3;
  constexpr int kThreads = 2;
  constexpr uint64_t kRounds = 20000;
  std::vector<pid_t> children;
  for (int p = 1; p < kProcesses; ++p)
    children.push_back(Fork([this] {
      Hammer(kThreads, kRounds);
      return 0;
    }));
  Hammer(kThreads, kRounds);
  for (pid_t c : children) EXPECT_EQ(ExitStatus(c), 0);
  EXPECT_EQ(shared_->counter, kProcesses * kThreads * kRounds);
  EXPECT_EQ(shared_->overlaps, 0u);
  EXPECT_EQ(shared_->inside, 0u);
  std::printf("membarrier light fences: %s\n", softrdma::light_fences() ? "yes" : "no");
}

TEST_F(ProcessLockTest, AWaiterAsleepOnTheLockTakesItWhenItIsReleased) {
  shared_->lock.lock();
  const pid_t child = Fork([this] {
    ProcessLockGuard guard(shared_->lock);  // sleeps: the parent holds it
    ++shared_->counter;
    return 0;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the child is asleep by now
  EXPECT_EQ(shared_->counter, 0u);
  shared_->lock.unlock();
  EXPECT_EQ(ExitStatus(child), 0);
  EXPECT_EQ(shared_->counter, 1u);
}

TEST_F(ProcessLockTest, ALockWhoseOwnerDiedIsTakenOver) {
  const pid_t child = Fork([this] {
    shared_->lock.lock();
    return 0;  // exits holding it
  });
  ASSERT_EQ(ExitStatus(child), 0);
  shared_->lock.lock();  // would wait forever on a dead owner
  shared_->lock.unlock();
  EXPECT_TRUE(shared_->lock.try_lock());
  shared_->lock.unlock();
}

TEST_F(ProcessLockTest, ALockWhoseOwnerExitedIsTakenOverBeforeItIsReaped) {
  const pid_t child = Fork([this] {
    shared_->lock.lock();
    return 0;  // exits holding it
  });
  ASSERT_TRUE(ExitedUnreaped(child));
  // The parent that would reap its child later must not wait for it to let go first.
  EXPECT_TRUE(TakenFromAZombie(child, [this] {
    shared_->lock.lock();
    shared_->lock.unlock();
  }));
}

// A critical section that notices another thread inside it.
struct Guarded {
  uint64_t counter = 0;
  int inside = 0;
  int overlaps = 0;
  void enter_and_leave() {
    if (inside++ != 0) ++overlaps;
    ++counter;
    --inside;
  }
};

TEST(BiasedLockTest, TheOwnerAndThreadsThatComeLaterLoseNoUpdate) {
  BiasedLock lock;
  Guarded g;
  constexpr uint64_t kRounds = 200000;
  std::atomic<bool> owner_started{false};
  std::thread owner([&] {
    for (uint64_t i = 0; i < kRounds; ++i) {
      BiasedLock::Guard hold(lock);
      g.enter_and_leave();
      owner_started.store(true, std::memory_order_relaxed);
    }
  });
  // The others come once the owner holds the bias, and revoke it while it runs.
  while (!owner_started.load(std::memory_order_relaxed)) std::this_thread::yield();
  std::vector<std::thread> others;
  for (int t = 0; t < 2; ++t)
    others.emplace_back([&] {
      for (uint64_t i = 0; i < kRounds; ++i) {
        BiasedLock::Guard hold(lock);
        g.enter_and_leave();
      }
    });
  owner.join();
  for (std::thread& t : others) t.join();
  EXPECT_EQ(g.counter, 3 * kRounds);
  EXPECT_EQ(g.overlaps, 0);
}

TEST(BiasedLockTest, AnotherThreadWaitsUntilTheOwnerLeaves) {
  BiasedLock lock;
  std::atomic<bool> owner_left{false};
  const bool as_owner = lock.lock();
  EXPECT_EQ(as_owner, softrdma::light_fences()) << "the first thread becomes the owner";
  std::atomic<bool> other_inside{false};
  bool owner_gone_when_entered = false;
  std::thread other([&] {
    BiasedLock::Guard hold(lock);
    owner_gone_when_entered = owner_left.load();
    other_inside = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(other_inside.load()) << "entered while the owner was inside";
  owner_left = true;
  lock.unlock(as_owner);
  other.join();
  EXPECT_TRUE(owner_gone_when_entered);
  // Revoked: the former owner now takes the shared lock, and still excludes the other.
  BiasedLock::Guard again(lock);
  EXPECT_TRUE(other_inside.load());
}

// A BiasedLock in shared memory, biased to a thread of one process while threads of another
// process come later and revoke it: receive queues and CQs are taken this way by the peer
// that delivers into them.
struct SharedBiased {
  SharedBiasedLock lock;
  Guarded guarded;
  std::atomic<uint32_t> owner_started;
};

class SharedBiasedLockTest : public ForkingTest {
 protected:
  void SetUp() override {
    void* p = mmap(nullptr, sizeof(SharedBiased), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    biased_ = static_cast<SharedBiased*>(p);  // zero-filled: free, no owner yet
  }
  void TearDown() override { munmap(biased_, sizeof(SharedBiased)); }
  SharedBiased* biased_ = nullptr;
};

TEST_F(SharedBiasedLockTest, ThreadsOfAnotherProcessRevokeItAndLoseNoUpdate) {
  constexpr uint64_t kRounds = 200000;
  const pid_t owner = Fork([this] {
    for (uint64_t i = 0; i < kRounds; ++i) {
      SharedBiasedLock::Guard hold(biased_->lock);
      biased_->guarded.enter_and_leave();
      biased_->owner_started.store(1, std::memory_order_relaxed);
    }
    return 0;
  });
  while (!biased_->owner_started.load(std::memory_order_relaxed)) std::this_thread::yield();
  std::vector<std::thread> others;
  for (int t = 0; t < 2; ++t)
    others.emplace_back([this] {
      for (uint64_t i = 0; i < kRounds; ++i) {
        SharedBiasedLock::Guard hold(biased_->lock);
        biased_->guarded.enter_and_leave();
      }
    });
  for (std::thread& t : others) t.join();
  EXPECT_EQ(ExitStatus(owner), 0);
  EXPECT_EQ(biased_->guarded.counter, 3 * kRounds);
  EXPECT_EQ(biased_->guarded.overlaps, 0);
}

TEST_F(SharedBiasedLockTest, AThreadOfAnotherProcessAtTheSameAddressIsNotTheOwner) {
  // A forked child's thread has its parent's thread control block address: only the pid
  // tells them apart.
  const bool as_owner = biased_->lock.lock();
  ASSERT_EQ(as_owner, softrdma::light_fences());
  const pid_t child = Fork([this] {
    SharedBiasedLock::Guard hold(biased_->lock);  // waits for the parent, then revokes
    biased_->guarded.enter_and_leave();
    return 0;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(biased_->guarded.counter, 0u) << "the child entered while the owner was inside";
  biased_->lock.unlock(as_owner);
  EXPECT_EQ(ExitStatus(child), 0);
  EXPECT_EQ(biased_->guarded.counter, 1u);
}

TEST_F(SharedBiasedLockTest, AnOwnerThatDiedInsideDoesNotHoldUpTheOthers) {
  if (!softrdma::light_fences()) GTEST_SKIP() << "no owners without membarrier";
  const pid_t owner = Fork([this] {
    const bool as_owner = biased_->lock.lock();
    return as_owner ? 0 : 1;  // exits inside, as a process killed there would
  });
  ASSERT_EQ(ExitStatus(owner), 0) << "the child did not become the owner";
  SharedBiasedLock::Guard hold(biased_->lock);  // would wait forever for a dead owner to leave
  biased_->guarded.enter_and_leave();
  EXPECT_EQ(biased_->guarded.counter, 1u);
}

TEST_F(SharedBiasedLockTest, AnOwnerThatExitedInsideDoesNotHoldUpTheOthersBeforeItIsReaped) {
  if (!softrdma::light_fences()) GTEST_SKIP() << "no owners without membarrier";
  const pid_t owner = Fork([this] {
    const bool as_owner = biased_->lock.lock();
    return as_owner ? 0 : 1;  // exits inside
  });
  ASSERT_TRUE(ExitedUnreaped(owner));
  EXPECT_TRUE(TakenFromAZombie(owner, [this] {
    SharedBiasedLock::Guard hold(biased_->lock);
    biased_->guarded.enter_and_leave();
  }));
  EXPECT_EQ(biased_->guarded.counter, 1u);
}

}  // namespace

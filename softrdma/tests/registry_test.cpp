// The host-wide registry of QPs and memory keys (engine/registry.*), in a registry file of
// this test's own: what a process that dies inside an access leaves behind.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "engine/registry.hpp"
#include "gtest/gtest.h"

namespace softrdma {
namespace {

class RegistryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Before the first Registry::instance(), which maps the file for the process's life.
    path_ = std::filesystem::temp_directory_path() /
            ("softrdma-registry-test-" + std::to_string(getpid()));
    setenv("SOFTRDMA_REGISTRY", path_.c_str(), 1);
  }
  // Its QP number range is taken over by the next registry that finds the file gone.
  static void TearDownTestSuite() { std::filesystem::remove(path_); }

  static uint32_t NewKey() {
    const uint32_t key = Registry::instance().claim_mr(1, 0, 0x1000, 4096, 0x1000, nullptr);
    EXPECT_NE(key, 0u);
    return key;
  }

  // A child takes `users` as an accessor does (a count that retiring its slot waits to
  // drain) and is killed before it lets go.
  static void HoldAndDie(std::atomic<uint32_t>& users) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      users.fetch_add(1);
      raise(SIGKILL);
      _exit(1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    ASSERT_EQ(users.load(), 1u);
  }
  static void PinAndDie(uint32_t key) { HoldAndDie(Registry::instance().mr_users(key)); }

  static inline std::filesystem::path path_;
};

TEST_F(RegistryTest, AKeySlotThatAKilledAccessorLeftPinnedIsNeverClaimedAgain) {
  Registry& registry = Registry::instance();
  const uint32_t stale = NewKey();
  const uint32_t poisoned = Registry::mr_index(stale);
  registry.release_mr(stale);
  ASSERT_NO_FATAL_FAILURE(PinAndDie(stale));  // pinned the stale key: the count stays up

  // Claims go round the whole table (each key released again), passing over that slot.
  for (uint32_t i = 0; i < Registry::kMrCapacity; ++i) {
    const uint32_t key = NewKey();
    ASSERT_NE(Registry::mr_index(key), poisoned) << "claimed after " << i << " others";
    registry.release_mr(key);
  }

  // And a key released meanwhile did not wait for the dead accessor.
  const uint32_t key = NewKey();
  const auto start = std::chrono::steady_clock::now();
  registry.release_mr(key);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
}

TEST_F(RegistryTest, AQpSlotThatAKilledPeerLeftHeldIsNeverClaimedAgain) {
  Registry& registry = Registry::instance();
  const uint32_t stale = registry.claim_qpn(0, -1);
  ASSERT_NE(stale, 0u);
  std::atomic<uint32_t>& users = registry.qp_slot(stale)->users;
  registry.release_qpn(stale);
  ASSERT_NO_FATAL_FAILURE(HoldAndDie(users));  // a request to the gone QP, never finished

  for (uint32_t i = 0; i < Registry::kQpCapacity; ++i) {
    const uint32_t qpn = registry.claim_qpn(0, -1);
    ASSERT_NE(qpn, 0u);
    ASSERT_NE(qpn, stale) << "claimed after " << i << " others";
    registry.release_qpn(qpn);
  }
  EXPECT_EQ(users.load(), 1u) << "a count is never zeroed under a late holder";
}

TEST_F(RegistryTest, AMarkNamesItsOneRequesterOrSaysMany) {
  Registry& registry = Registry::instance();
  std::atomic<uint32_t> mark{0};
  const uint32_t a = registry.reacher_mark(registry.qpn_at(3));
  const uint32_t b = registry.reacher_mark(registry.qpn_at(9));
  Registry::note_reached_directly(mark, a);
  EXPECT_EQ(mark.load(), a);
  Registry::note_reached_directly(mark, a);
  EXPECT_EQ(mark.load(), a);
  Registry::note_reached_directly(mark, b);
  EXPECT_EQ(mark.load(), Registry::kReachedByMany);
  Registry::note_reached_directly(mark, a);
  EXPECT_EQ(mark.load(), Registry::kReachedByMany) << "many stays many";
}

// Retiring a key waits for the announcement of the requester its mark names, and for every
// requester's once several reached it.
TEST_F(RegistryTest, RetiringAKeyWaitsForTheAnnouncementsItsMarkStandsFor) {
  using namespace std::chrono;
  Registry& registry = Registry::instance();
  const uint32_t reacher = registry.claim_qpn(0, -1), other = registry.claim_qpn(0, -1);
  ASSERT_TRUE(reacher != 0 && other != 0);
  auto retire_while_announced = [&](uint32_t announcing, bool by_both) {
    const uint32_t key = NewKey();
    std::atomic<uint32_t>& mark = registry.mr_slot(key)->reached_directly;
    Registry::note_reached_directly(mark, registry.reacher_mark(reacher));
    if (by_both) Registry::note_reached_directly(mark, registry.reacher_mark(other));
    std::atomic<uint64_t>& word = registry.direct_access(announcing).word;
    word.store(DirectAccess::of(1, key));
    std::thread ends([&word] {
      std::this_thread::sleep_for(milliseconds(100));
      word.store(0);
    });
    const auto start = steady_clock::now();
    registry.release_mr(key);
    const auto waited = steady_clock::now() - start;
    ends.join();
    return waited;
  };
  EXPECT_GE(retire_while_announced(reacher, false), milliseconds(90));
  EXPECT_LT(retire_while_announced(other, false), milliseconds(90))
      << "a requester that never marked the key cannot be inside it";
  EXPECT_GE(retire_while_announced(other, true), milliseconds(90));
  registry.release_qpn(reacher);
  registry.release_qpn(other);
}

TEST_F(RegistryTest, DeregisteringAKeyAKilledAccessorHeldWaitsOnlyForItsBound) {
  Registry& registry = Registry::instance();
  const uint32_t key = NewKey();
  ASSERT_NO_FATAL_FAILURE(PinAndDie(key));
  const auto start = std::chrono::steady_clock::now();
  registry.release_mr(key);  // cannot tell a dead accessor from a slow one: waits, bounded
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(registry.mr_slot(key)->key.load(), 0u) << "the key is retired all the same";
}

}  // namespace
}  // namespace softrdma

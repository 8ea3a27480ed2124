// The host-wide registry of QPs and memory keys (engine/registry.*), in a registry file of
// this test's own: what a process that dies inside an access leaves behind.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/range_claims.hpp"
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

  // A child does `act` (takes a count that retiring a slot waits to drain, as an accessor
  // does) and is killed before it lets go. Returns the child's pid, reaped.
  template <class Act>
  static pid_t ActAndDie(Act act) {
    const pid_t child = fork();
    EXPECT_GE(child, 0);
    if (child == 0) {
      act();
      raise(SIGKILL);
      _exit(1);
    }
    int status = 0;
    EXPECT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    return child;
  }
  // An unnamed pin: one taken while every named place was held by other processes.
  static void PinUnnamedAndDie(const MrSlot& slot) {
    EntryPins& pins = Registry::instance().mr_pins(slot);
    ActAndDie([&pins] { pins.unnamed.fetch_add(1); });
    ASSERT_EQ(pins.unnamed.load(), 1u);
  }
  static uint64_t Named(pid_t pid, uint32_t pins) {
    return uint64_t{static_cast<uint32_t>(pid)} << 32 | pins;
  }

  static inline std::filesystem::path path_;
};

TEST_F(RegistryTest, AKeySlotThatAKilledAccessorLeftAnUnnamedPinInIsNeverClaimedAgain) {
  Registry& registry = Registry::instance();
  const uint32_t stale = NewKey();
  const MrSlot& poisoned = *registry.mr_slot(stale);
  registry.release_mr(stale);
  ASSERT_NO_FATAL_FAILURE(PinUnnamedAndDie(poisoned));  // pinned the stale key: it stays up

  // Claims land all over the table (each key released again), passing over that slot: every
  // slot is some key's home about four times in these.
  for (uint32_t i = 0; i < 4 * Registry::kMrCapacity; ++i) {
    const uint32_t key = NewKey();
    ASSERT_NE(registry.mr_slot(key), &poisoned) << "claimed after " << i << " others";
    registry.release_mr(key);
  }

  // And a key released meanwhile did not wait for the dead accessor.
  const uint32_t key = NewKey();
  const auto start = std::chrono::steady_clock::now();
  registry.release_mr(key);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
}

TEST_F(RegistryTest, AQpSlotThatAKilledPeerLeftAnUnnamedHoldInIsNeverClaimedAgain) {
  Registry& registry = Registry::instance();
  const uint32_t stale = registry.claim_qpn(0, -1);
  ASSERT_NE(stale, 0u);
  EntryPins& pins = registry.qp_pins(*registry.qp_slot(stale));
  registry.release_qpn(stale);
  // A request to the gone QP, never finished, held while every named place was taken.
  ActAndDie([&pins] { pins.unnamed.fetch_add(1); });
  ASSERT_EQ(pins.unnamed.load(), 1u);

  for (uint32_t i = 0; i < Registry::kQpCapacity; ++i) {
    const uint32_t qpn = registry.claim_qpn(0, -1);
    ASSERT_NE(qpn, 0u);
    ASSERT_NE(qpn, stale) << "claimed after " << i << " others";
    registry.release_qpn(qpn);
  }
  EXPECT_EQ(pins.unnamed.load(), 1u) << "a count is never zeroed under a late holder";
}

TEST_F(RegistryTest, DestroyingAQpAKilledPeerHeldDoesNotWaitForIt) {
  using namespace std::chrono;
  Registry& registry = Registry::instance();
  const uint32_t qpn = registry.claim_qpn(0, -1);
  ASSERT_NE(qpn, 0u);
  EntryPins& pins = registry.qp_pins(*registry.qp_slot(qpn));
  const pid_t dead = ActAndDie([&pins] { pins.pin(); });  // killed while delivering into it
  ASSERT_EQ(pins.named[0].load(), Named(dead, 1));
  const auto start = steady_clock::now();
  registry.release_qpn(qpn);
  EXPECT_LT(steady_clock::now() - start, milliseconds(500)) << "the dead peer was waited for";
  EXPECT_EQ(pins.named[0].load(), 0u) << "its place is free again";
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

TEST_F(RegistryTest, DeregisteringAKeyAKilledAccessorHeldUnnamedWaitsOnlyForItsBound) {
  Registry& registry = Registry::instance();
  const uint32_t key = NewKey();
  const MrSlot& slot = *registry.mr_slot(key);
  ASSERT_NO_FATAL_FAILURE(PinUnnamedAndDie(slot));
  const auto start = std::chrono::steady_clock::now();
  registry.release_mr(key);  // cannot tell a dead accessor from a slow one: waits, bounded
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(slot.key.load(), 0u) << "the key is retired all the same";
  EXPECT_EQ(registry.mr_slot(key), nullptr);
}

TEST_F(RegistryTest, DeregisteringAKeyAKilledAccessorPinnedDoesNotWaitForIt) {
  using namespace std::chrono;
  Registry& registry = Registry::instance();
  const uint32_t key = NewKey();
  const MrSlot& slot = *registry.mr_slot(key);
  EntryPins& pins = registry.mr_pins(slot);
  const pid_t dead = ActAndDie([&pins] {
    pins.pin();
    pins.pin();
  });
  ASSERT_EQ(pins.named[0].load(), Named(dead, 2));
  const auto start = steady_clock::now();
  registry.release_mr(key);
  EXPECT_LT(steady_clock::now() - start, milliseconds(500)) << "the dead pinner was waited for";
  EXPECT_EQ(slot.key.load(), 0u);
  EXPECT_EQ(pins.named[0].load(), 0u) << "its place is free again";

  // And the slot is not passed over: claims land on it again (in 16 times as many claims as
  // slots, all miss it only with probability e^-16).
  bool claimed_again = false;
  for (uint32_t i = 0; i < 16 * Registry::kMrCapacity && !claimed_again; ++i) {
    const uint32_t next = NewKey();
    claimed_again = registry.mr_slot(next) == &slot;
    registry.release_mr(next);
  }
  EXPECT_TRUE(claimed_again);
}

// Keys a peer could try: every bit of 10 000 live keys varies, as many bits as a key has
// vary in the name of each, and no key follows from the one before (what ReDMArk shows a
// counter or a slot index in the key allows).
TEST_F(RegistryTest, KeysCarryAtLeast24RandomBitsAndNoSequence) {
  Registry& registry = Registry::instance();
  constexpr int kKeys = 10000;
  std::vector<uint32_t> keys;
  for (int i = 0; i < kKeys; ++i) keys.push_back(NewKey());
  uint32_t ones = 0, zeros = 0;
  for (const uint32_t k : keys) {
    ones |= k;
    zeros |= ~k;
  }
  EXPECT_EQ(ones & zeros, 0xffffffffu) << "bits that never change: " << std::hex << ~(ones & zeros);
  // Every bit of the name is set in about half the keys (within 5 standard deviations).
  for (int bit = Registry::kKeyVariantBits; bit < 32; ++bit) {
    const auto set =
        std::count_if(keys.begin(), keys.end(), [bit](uint32_t k) { return (k >> bit) & 1; });
    EXPECT_NEAR(static_cast<double>(set), kKeys / 2.0, 5 * std::sqrt(kKeys / 4.0)) << "bit " << bit;
  }
  // Distinct names, and the difference of two keys in a row is as random as a key: no step
  // repeats more than chance allows (any repeat at all is 10000^2 / 2^33 ~ 1% likely).
  std::set<uint32_t> names, steps;
  for (int i = 0; i < kKeys; ++i) {
    names.insert(keys[i] >> Registry::kKeyVariantBits);
    if (i) steps.insert(keys[i] - keys[i - 1]);
  }
  EXPECT_EQ(names.size(), size_t{kKeys});
  EXPECT_GE(steps.size(), size_t{kKeys - 3});
  // The slot a key lands in is not in the key: keys of neighbouring slots share no bits.
  std::vector<std::pair<uint32_t, uint32_t>> by_slot;
  for (const uint32_t k : keys)
    by_slot.push_back({registry.mr_slot_index(*registry.mr_slot(k)), k});
  std::sort(by_slot.begin(), by_slot.end());
  int same_top_byte = 0;
  for (size_t i = 1; i < by_slot.size(); ++i)
    same_top_byte += (by_slot[i].second >> 24) == (by_slot[i - 1].second >> 24);
  EXPECT_LT(same_top_byte, kKeys / 64) << "neighbouring slots' keys look alike";
  for (const uint32_t k : keys) registry.release_mr(k);
}

TEST(EntryPinsTest, APinIsHeldUnderItsProcessUntilDropped) {
  EntryPins pins;
  pins.pin();
  pins.pin();
  EXPECT_EQ(pins.named[0].load() >> 32, static_cast<uint32_t>(getpid()));
  EXPECT_EQ(pins.named[0].load() & 0xffffffffu, 2u) << "one place per process";
  EXPECT_FALSE(pins.drained_but_for_the_dead()) << "this process lives";
  pins.unpin();
  EXPECT_FALSE(pins.drained_but_for_the_dead());
  pins.unpin();
  EXPECT_EQ(pins.named[0].load(), 0u);
  EXPECT_TRUE(pins.drained_but_for_the_dead());
}

// A pin stops at the first place that is its process's or free: a process may then hold
// several places, and its pins are their sum.
TEST(EntryPinsTest, APinTakesTheFirstPlaceThatIsItsOwnOrFree) {
  EntryPins pins;
  const uint64_t me = uint64_t{static_cast<uint32_t>(getpid())} << 32;
  const uint64_t other = uint64_t{1} << 32 | 1;  // init: alive for the test's life
  pins.named[0].store(other);
  pins.named[2].store(me | 1);
  pins.pin();
  EXPECT_EQ(pins.named[1].load(), me | 1) << "the free place before this process's own";
  EXPECT_EQ(pins.named[2].load(), me | 1);
  pins.pin();
  EXPECT_EQ(pins.named[1].load(), me | 2) << "this process's first place";
  EXPECT_FALSE(pins.drained_but_for_the_dead());
  for (int i = 0; i < 3; ++i) pins.unpin();  // the two pins and the one in place 2
  EXPECT_EQ(pins.named[0].load(), other) << "another process's pin dropped";
  EXPECT_EQ(pins.named[1].load(), 0u);
  EXPECT_EQ(pins.named[2].load(), 0u);
  EXPECT_EQ(pins.unnamed.load(), 0u);
}

TEST(EntryPinsTest, PinsBeyondTheNamedPlacesAreCountedUnnamed) {
  EntryPins pins;
  const auto held_by = [](pid_t pid) { return uint64_t{static_cast<uint32_t>(pid)} << 32 | 1; };
  for (auto& place : pins.named) place.store(held_by(1));  // init: alive for the test's life
  pins.pin();
  EXPECT_EQ(pins.unnamed.load(), 1u);
  EXPECT_FALSE(pins.drained_but_for_the_dead());
  pins.unpin();
  EXPECT_EQ(pins.unnamed.load(), 0u);
  for (auto& place : pins.named) EXPECT_EQ(place.load(), held_by(1)) << "others' pins stay";
  EXPECT_FALSE(pins.drained_but_for_the_dead()) << "their processes live";
}

TEST(EntryPinsTest, AZombieHoldsNoPin) {
  EntryPins pins;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  // Waits for it to exit without reaping it: a zombie, whose memory is gone.
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  pins.named[2].store(uint64_t{static_cast<uint32_t>(child)} << 32 | 1);
  EXPECT_TRUE(pins.drained_but_for_the_dead()) << "an unreaped child was waited for";
  EXPECT_EQ(pins.named[2].load(), 0u);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
}

TEST(EntryPinsTest, ThePlacesOfDeadProcessesAreFreed) {
  EntryPins pins;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  pins.named[3].store(uint64_t{static_cast<uint32_t>(child)} << 32 | 5);
  EXPECT_TRUE(pins.drained_but_for_the_dead());
  EXPECT_EQ(pins.named[3].load(), 0u);
}

// The QP number ranges' claims (engine/range_claims.*), in /dev/shm beside every other
// registry's. Files another user makes there can neither take this user's range nor keep it
// from getting one: uid 12345 plays that user (no test runs as it); needs root to give files
// to it.
class RangeClaimsTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kOtherUid = 12345;
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to make files of another user";
    registry_ = std::filesystem::temp_directory_path() /
                ("softrdma-claims-test-" + std::to_string(getpid()));
    std::ofstream(registry_.string()) << "";  // a claim holds while its registry file is there
  }
  void TearDown() override {
    for (const auto& path : made_) std::filesystem::remove(path);
    if (claim_.held) std::filesystem::remove(std::string("/dev/shm/") + claim_.name);
    std::filesystem::remove(registry_);
  }
  // A claim file of range `range` under the name of user `named`, owned by `owner`.
  void Plant(uint32_t range, uint32_t named, uint32_t owner) {
    char name[128];
    std::snprintf(name, sizeof name, "/dev/shm/softrdma-range-v2-%u-%u-%016llx", range, named,
                  static_cast<unsigned long long>(0x5eed000000000000ull + made_.size()));
    std::ofstream(name) << registry_.string();
    ASSERT_EQ(chown(name, owner, owner), 0);
    made_.push_back(name);
  }
  std::filesystem::path registry_;
  std::vector<std::string> made_;
  RangeClaim claim_{};
};

TEST_F(RangeClaimsTest, FilesMadeUnderThisUsersNameByAnotherAreNoClaims) {
  const uint32_t me = geteuid();
  for (uint32_t k = 0; k < kRangeCandidates; ++k)
    Plant(candidate_range(me, k, Registry::kQpnRanges), me, kOtherUid);
  uint32_t range = Registry::kQpnRanges;
  ASSERT_NO_THROW(range = claim_qpn_range(registry_.string(), claim_, Registry::kQpnRanges));
  EXPECT_LT(range, Registry::kQpnRanges);
  EXPECT_NE(
      std::string(claim_.name).find("-" + std::to_string(range) + "-" + std::to_string(me) + "-"),
      std::string::npos)
      << claim_.name;
  struct stat st {};
  ASSERT_EQ(stat((std::string("/dev/shm/") + claim_.name).c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, me);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "a claim is its owner's alone";
}

TEST_F(RangeClaimsTest, AnotherUserClaimingEveryRangeKeepsOnlyItsOwnCandidates) {
  for (uint32_t r = 0; r < Registry::kQpnRanges; ++r) Plant(r, kOtherUid, kOtherUid);
  uint32_t range = Registry::kQpnRanges;
  ASSERT_NO_THROW(range = claim_qpn_range(registry_.string(), claim_, Registry::kQpnRanges));
  for (uint32_t k = 0; k < kRangeCandidates; ++k)
    EXPECT_NE(range, candidate_range(kOtherUid, k, Registry::kQpnRanges))
        << "took a range the other user holds";
  // The same registry keeps its range (a new process finds its claim file); the other
  // user's files are still there.
  RangeClaim fresh{};
  EXPECT_EQ(claim_qpn_range(registry_.string(), fresh, Registry::kQpnRanges), range);
  EXPECT_STREQ(fresh.name, claim_.name);
  EXPECT_TRUE(std::filesystem::exists(made_.front()));
}

TEST_F(RangeClaimsTest, TwoRegistriesOfOneUserClaimingAtOnceGetTwoRanges) {
  const std::filesystem::path second = registry_.string() + "-second";
  std::ofstream(second.string()) << "";
  RangeClaim other{};
  uint32_t a = 0, b = 0;
  std::thread t([&] { b = claim_qpn_range(second.string(), other, Registry::kQpnRanges); });
  a = claim_qpn_range(registry_.string(), claim_, Registry::kQpnRanges);
  t.join();
  EXPECT_NE(a, b);
  std::filesystem::remove(std::string("/dev/shm/") + other.name);
  std::filesystem::remove(second);
}

}  // namespace
}  // namespace softrdma

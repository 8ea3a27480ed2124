// wire::Standby on its own: when a socket-serving thread stands by while applications take
// what arrives, and everything that sends it back to its sockets. Sockets are a socketpair;
// the "applications" are this test's threads. Whether a stand-by lasts depends on the taking
// thread being scheduled within every nap, so the program runs alone (RUN_SERIAL).
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include "wire/arrivals.hpp"
#include "wire/standby.hpp"

namespace {

using softrdma::wire::Standby;
using namespace std::chrono_literals;

// Far beyond any nap: a stand-by that has not returned by then never would.
constexpr std::chrono::milliseconds kBound = 5s;
// For what should end a stand-by at once: well under kBound, still far beyond a nap.
constexpr std::chrono::milliseconds kPrompt = 1s;

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

class StandbyTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair_), 0); }
  void TearDown() override {
    stop_taking();
    for (int fd : pair_)
      if (fd >= 0) close(fd);
  }

  // Applications take kStandDownAfter arrivals in a row: the thread is asked to stand by.
  void ask_to_stand_by() {
    for (uint64_t i = 0; i < Standby::kStandDownAfter; ++i) standby_.application_took();
    ASSERT_TRUE(readable(standby_.fd()));
  }

  // The serving thread's stand-by, on the first socket of the pair, on a thread of its own.
  // Destroyed, it sends the thread back (wake_all) if it still stands by, and joins it.
  class StandingBy {
   public:
    StandingBy(Standby& standby, int socket, std::function<void()> at_each_nap_end = {})
        : thread_([this, &standby, socket, at_each_nap_end] {
            const auto began = std::chrono::steady_clock::now();
            standby.stand_by(std::span(&socket, 1), at_each_nap_end);
            took_ = std::chrono::steady_clock::now() - began;
            done_.set_value();
          }) {}
    ~StandingBy() {
      if (!returned_within(0s)) Standby::wake_all();
      thread_.join();
    }
    StandingBy(const StandingBy&) = delete;
    StandingBy& operator=(const StandingBy&) = delete;
    bool returned_within(std::chrono::milliseconds wait) {
      return returned_.wait_for(wait) == std::future_status::ready;
    }
    // How long stand_by() took, once it returned.
    std::chrono::steady_clock::duration took() const { return took_; }

   private:
    std::promise<void> done_;
    std::future<void> returned_ = done_.get_future();
    std::chrono::steady_clock::duration took_{};
    std::thread thread_;
  };

  // With keep_taking() running: a stand-by seen to last kLasting. A taker descheduled for a
  // whole nap (a busy host, a stolen virtual CPU) ends one, and the taker's own run of takes
  // asks for the next: a few tries.
  std::unique_ptr<StandingBy> standing_while_taking() {
    constexpr std::chrono::milliseconds kLasting = 20ms;
    for (int tries = 0; tries < 5; ++tries) {
      for (auto give_up = std::chrono::steady_clock::now() + kBound;
           !readable(standby_.fd()) && std::chrono::steady_clock::now() < give_up;)
        std::this_thread::sleep_for(1ms);
      auto standing = std::make_unique<StandingBy>(standby_, pair_[0]);
      if (!standing->returned_within(kLasting)) return standing;
    }
    ADD_FAILURE() << "no stand-by lasted " << kLasting.count() << " ms while applications took";
    return nullptr;
  }

  // An application that keeps taking arrivals, until stop_taking().
  void keep_taking() {
    taker_ = std::thread([this] {
      while (!stop_.load()) {
        standby_.application_took();
        std::this_thread::yield();
      }
    });
  }
  void stop_taking() {
    stop_ = true;
    if (taker_.joinable()) taker_.join();
  }

  void arrive() { ASSERT_EQ(write(pair_[1], "x", 1), 1); }

  Standby standby_;
  int pair_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::thread taker_;
};

TEST_F(StandbyTest, ApplicationsTakingArrivalsInARowAskTheThreadToStandBy) {
  ASSERT_GE(standby_.fd(), 0);
  for (uint64_t i = 1; i < Standby::kStandDownAfter; ++i) standby_.application_took();
  EXPECT_FALSE(readable(standby_.fd()));
  standby_.application_took();
  EXPECT_TRUE(readable(standby_.fd()));
}

TEST_F(StandbyTest, AnArrivalTheThreadServesStartsTheCountAgain) {
  for (uint64_t i = 1; i < Standby::kStandDownAfter; ++i) standby_.application_took();
  standby_.thread_took();
  for (uint64_t i = 1; i < Standby::kStandDownAfter; ++i) standby_.application_took();
  EXPECT_FALSE(readable(standby_.fd()));
  standby_.application_took();
  EXPECT_TRUE(readable(standby_.fd()));
}

TEST_F(StandbyTest, WithoutARequestTheThreadDoesNotStandBy) {
  // As after wake_all() wrote to a thread that no longer stood by: back at once.
  StandingBy standing(standby_, pair_[0]);
  ASSERT_TRUE(standing.returned_within(kBound));
  EXPECT_LT(standing.took(), Standby::kLongestNap);  // a stand-by naps longer than that
}

TEST_F(StandbyTest, ItNapsWhileApplicationsTakeAndReturnsWhenTheyStopWithSomethingWaiting) {
  ask_to_stand_by();
  arrive();  // waits, but the applications are taking: they will get to it
  keep_taking();
  auto standing = standing_while_taking();
  ASSERT_TRUE(standing);
  stop_taking();
  EXPECT_TRUE(standing->returned_within(kBound));
}

// Something seen waiting as a nap ends may have come just then: only when it still waits
// after one more (short) nap without a take has it waited a whole nap untaken.
TEST_F(StandbyTest, SomethingLeftWaitingAWholeNapUntakenSendsTheThreadBackAfterTwoNaps) {
  ask_to_stand_by();
  arrive();
  int naps = 0;
  StandingBy standing(standby_, pair_[0], [&naps] { ++naps; });
  ASSERT_TRUE(standing.returned_within(kBound));
  EXPECT_EQ(naps, 2);
  EXPECT_GE(standing.took(), Standby::kFirstNap * 2);
  EXPECT_LT(standing.took(), Standby::kFirstNap * 2 + Standby::kLongestNap);
}

// The thread, woken by the kernel, often serves an arrival first although applications are
// at it (their calls look at the sockets, and would have taken it): it stands by at once.
TEST_F(StandbyTest, ApplicationsLookingSinceTheThreadLastServedSendItToStandByAtItsServe) {
  softrdma::wire::looks_by_applications.store(0);
  standby_.thread_took();
  EXPECT_FALSE(readable(standby_.fd()));
  softrdma::wire::looks_by_applications.fetch_add(Standby::kStandDownAfterLooks - 1);
  standby_.thread_took();
  EXPECT_FALSE(readable(standby_.fd())) << "too few looks since its last serve";
  softrdma::wire::looks_by_applications.fetch_add(Standby::kStandDownAfterLooks);
  standby_.thread_took();
  EXPECT_TRUE(readable(standby_.fd()));
}

TEST_F(StandbyTest, AQuietProcessSendsTheThreadBackToItsSockets) {
  ask_to_stand_by();  // then nothing arrives and nobody takes anything
  StandingBy standing(standby_, pair_[0]);
  EXPECT_TRUE(standing.returned_within(kBound));
}

TEST_F(StandbyTest, AnApplicationArmingACqSendsEveryThreadBackAtOnce) {
  ask_to_stand_by();
  keep_taking();  // alone, would keep it standing by
  auto standing = standing_while_taking();
  ASSERT_TRUE(standing);
  Standby::wake_all();
  EXPECT_TRUE(standing->returned_within(kPrompt));
}

TEST_F(StandbyTest, TheSocketHangingUpSendsTheThreadBack) {
  ask_to_stand_by();
  keep_taking();
  auto standing = standing_while_taking();
  ASSERT_TRUE(standing);
  close(pair_[1]);
  pair_[1] = -1;
  EXPECT_TRUE(standing->returned_within(kPrompt));
}

TEST_F(StandbyTest, AfterStandingByARequestNeedsAFullRunOfTakesAgain) {
  ask_to_stand_by();
  {
    StandingBy standing(standby_, pair_[0]);  // quiet: back after its naps
    ASSERT_TRUE(standing.returned_within(kBound));
  }
  for (uint64_t i = 1; i < Standby::kStandDownAfter; ++i) standby_.application_took();
  EXPECT_FALSE(readable(standby_.fd()));
  standby_.application_took();
  EXPECT_TRUE(readable(standby_.fd()));
}

}  // namespace

// wire/arrivals on its own: which of the process's sockets an application's poll reads. A
// few are all read directly (no epoll_wait before each recv); beyond kReadDirectlyAtMost,
// only those epoll finds readable. The sockets are socketpairs; no device.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "epoll_registrations.hpp"
#include "wire/arrivals.hpp"

namespace {

using softrdma::wire::Arrivals;
using softrdma::wire::arrivals_now;
using softrdma::wire::kReadDirectlyAtMost;
using softrdma::wire::unwatch_for_polls;
using softrdma::wire::watch_for_polls;
using softrdma::wire::watched_for_polls;
using softrdma_test::epoll_registrations;

// One end of a socketpair, watched as a link or an inbound connection; the other end
// writes to it.
struct WatchedSocket {
  int fds[2] = {-1, -1};
  explicit WatchedSocket(bool is_link) {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    watch_for_polls(fds[0], is_link);
  }
  ~WatchedSocket() {
    unwatch_for_polls(fds[0]);
    close(fds[0]);
    close(fds[1]);
  }
  int fd() const { return fds[0]; }
  void arrive() const { ASSERT_EQ(write(fds[1], "x", 1), 1); }
};

std::vector<int> requests_of(const Arrivals& a) {
  std::vector<int> fds(a.request_fds, a.request_fds + a.requests);
  std::sort(fds.begin(), fds.end());
  return fds;
}

std::vector<int> fds_of(const std::vector<const WatchedSocket*>& sockets) {
  std::vector<int> fds;
  for (const WatchedSocket* s : sockets) fds.push_back(s->fd());
  std::sort(fds.begin(), fds.end());
  return fds;
}

Arrivals look() {
  return arrivals_now(watched_for_polls.load());
}

TEST(ArrivalsTest, AFewSocketsAreAllReadWhetherOrNotSomethingArrived) {
  WatchedSocket link(true), first(false), second(false);
  const Arrivals a = look();
  EXPECT_TRUE(a.responses);
  EXPECT_EQ(requests_of(a), fds_of({&first, &second}));
}

TEST(ArrivalsTest, WithoutLinksThereAreNoResponsesToRead) {
  WatchedSocket only(false);
  const Arrivals a = look();
  EXPECT_FALSE(a.responses);
  EXPECT_EQ(requests_of(a), fds_of({&only}));
}

TEST(ArrivalsTest, BeyondTheFewOnlyTheReadableAreRead) {
  std::vector<std::unique_ptr<WatchedSocket>> inbound;
  for (size_t i = 0; i <= kReadDirectlyAtMost; ++i)
    inbound.push_back(std::make_unique<WatchedSocket>(false));
  WatchedSocket link(true);
  Arrivals quiet = look();
  EXPECT_FALSE(quiet.responses);
  EXPECT_EQ(quiet.requests, 0);
  inbound[2]->arrive();
  link.arrive();
  const Arrivals a = look();
  EXPECT_TRUE(a.responses);
  EXPECT_EQ(requests_of(a), fds_of({inbound[2].get()}));
}

TEST(ArrivalsTest, FewAgainAfterSomeCloseTheRemainingAreReadDirectlyAndNoClosedOne) {
  std::vector<std::unique_ptr<WatchedSocket>> inbound;
  for (size_t i = 0; i < kReadDirectlyAtMost + 2; ++i)
    inbound.push_back(std::make_unique<WatchedSocket>(false));
  // The first ones go: the list must now name the later ones, which were never in it.
  inbound.erase(inbound.begin(), inbound.begin() + 3);
  std::vector<const WatchedSocket*> left;
  for (const auto& s : inbound) left.push_back(s.get());
  ASSERT_LE(left.size(), kReadDirectlyAtMost);
  EXPECT_EQ(requests_of(look()), fds_of(left));
}

// Read directly, a few sockets need no epoll set, and are in none: a socket in one costs
// every message that arrives on it a callback. Beyond the few, every one is in the set,
// those watched before too; back to few, none is.
TEST(ArrivalsTest, SocketsAreInTheEpollSetOnlyWhilePollsUseIt) {
  auto registered = [](const std::vector<std::unique_ptr<WatchedSocket>>& sockets) {
    int n = 0;
    for (const auto& s : sockets) n += epoll_registrations(s->fd());
    return n;
  };
  std::vector<std::unique_ptr<WatchedSocket>> sockets;
  for (size_t i = 0; i < kReadDirectlyAtMost; ++i)
    sockets.push_back(std::make_unique<WatchedSocket>(i == 0));
  EXPECT_EQ(registered(sockets), 0);
  sockets.push_back(std::make_unique<WatchedSocket>(false));
  EXPECT_EQ(registered(sockets), static_cast<int>(sockets.size()));
  sockets[1]->arrive();  // watched while few: epoll finds it all the same
  EXPECT_EQ(requests_of(look()), fds_of({sockets[1].get()}));
  sockets.pop_back();
  EXPECT_EQ(registered(sockets), 0);
  EXPECT_EQ(look().requests, static_cast<int>(kReadDirectlyAtMost) - 1);
}

TEST(ArrivalsTest, NoSocketsNothingToRead) {
  ASSERT_EQ(watched_for_polls.load(), 0u);
  const Arrivals a = softrdma::wire::arrivals();
  EXPECT_FALSE(a.responses);
  EXPECT_EQ(a.requests, 0);
}

}  // namespace

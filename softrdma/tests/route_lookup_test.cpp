// cm/route_lookup on its own: the source address that reaches a destination, and the cache
// of sources found while route changes are watched. Destinations are loopback addresses
// (127.0.0.0/8 all leave from 127.0.0.1); no device.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "cm/route_lookup.hpp"

namespace {

using softrdma::cm::remembered_sources;
using softrdma::cm::route_source;
using softrdma::cm::routes_changed;
using softrdma::cm::watch_route_changes;

sockaddr_in loopback(uint32_t host_order) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(9);
  a.sin_addr.s_addr = htonl(host_order);
  return a;
}

std::string address_of(const sockaddr_in& a) {
  char text[INET_ADDRSTRLEN];
  return inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
}

TEST(RouteLookupTest, ManyDestinationsKeepTheCacheBoundedAndEveryAnswerRight) {
  ASSERT_GE(watch_route_changes(), 0);
  routes_changed();
  size_t most = 0;
  for (uint32_t host = 1; host <= 10000; ++host) {
    sockaddr_in source{};
    ASSERT_EQ(route_source(loopback(0x7f000000u + host), &source), 0) << host;
    EXPECT_EQ(address_of(source), "127.0.0.1") << host;
    most = std::max(most, remembered_sources());
  }
  EXPECT_GT(most, 0u);     // sources were kept
  EXPECT_LE(most, 4096u);  // and no more than the bound
  // The cached answer is the same as a fresh one.
  sockaddr_in again{};
  ASSERT_EQ(route_source(loopback(0x7f000000u + 10000), &again), 0);
  EXPECT_EQ(address_of(again), "127.0.0.1");
}

// In a network namespace of its own (loopback only, and down) nothing is reachable.
TEST(RouteLookupTest, AnUnreachableDestinationIsAnErrorNotASource) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (unshare(CLONE_NEWNET) != 0) _exit(2);
    sockaddr_in source{};
    const int err = route_source(loopback(0xc6336401u), &source);  // 198.51.100.1
    _exit(err == ENETUNREACH ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "no network namespace (needs root)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "route_source did not answer ENETUNREACH";
}

}  // namespace

// A host shared by several softrdma processes and users. Each user's registry numbers its
// QPs in a range of its own and listens on the base port plus that range, so a QP number
// says which processes own it: programs of two users on one host serve peers on another
// host at once, a QP of another user on the same host is reached through that user's
// listener, and RC order holds with several processes per host. Processes that end without
// destroying their QPs leave slots of the host's QP table behind, which others reclaim.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <iterator>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "support/listening.hpp"
#include "support/other_user.hpp"
#include "support/subprocess.hpp"
#include "support/two_hosts.hpp"

using namespace std::chrono_literals;
using rdmakit::testing::Exit;
using rdmakit::testing::OtherUser;
using rdmakit::testing::Process;

namespace {

// The QP number range of the QP that an ibv_*_pingpong run reports as its own ("local
// address: ... QPN 0x004123"); -1 when the output has none.
long local_qpn_range(const std::string& output) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex(R"(local address:.*QPN (0x[0-9a-f]+))"))) return -1;
  constexpr long kFirstQpn = 0x100, kQpsPerRange = 16384;
  return (std::stol(m[1].str(), nullptr, 16) - kFirstQpn) / kQpsPerRange;
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Pingpong {
  std::string name;
  std::string program;
};

void PrintTo(const Pingpong& p, std::ostream* os) {
  *os << p.name;
}

// Three servers on host 0, two of root and the last of `nobody`, and a client for each on
// host 1, all at once. Adds a failure for every run that does not succeed; returns the
// servers' outputs.
std::vector<std::string> serve_from_two_users(
    const rdmakit::testing::TwoHosts& hosts, const OtherUser& nobody,
    const std::function<std::vector<std::string>(int port)>& server,
    const std::function<std::vector<std::string>(int port, const std::string& host)>& client) {
  const std::vector<int> ports = {18515, 18516, 18517};  // the namespace's own port space
  std::vector<std::unique_ptr<Process>> servers, clients;
  std::vector<std::string> outputs(ports.size());
  for (size_t i = 0; i < ports.size(); ++i) {
    const bool other = i == ports.size() - 1;
    const auto prefix =
        other ? concat(hosts.on(0), nobody.softrdma_run()) : concat(hosts.on(0), {SOFTRDMA_RUN});
    servers.push_back(std::make_unique<Process>(concat(prefix, server(ports[i])),
                                                other ? nobody.env() : std::vector<std::string>{}));
    if (!rdmakit::testing::wait_listening(ports[i], 10s, servers.back()->pid())) {
      ADD_FAILURE() << "server " << i << " did not listen";
      return outputs;
    }
  }
  for (int port : ports)
    clients.push_back(std::make_unique<Process>(
        concat(concat(hosts.on(1), {SOFTRDMA_RUN}), client(port, hosts.address(0)))));
  for (size_t i = 0; i < ports.size(); ++i) {
    const Exit client_exit = clients[i]->wait(120s);
    const Exit server_exit = servers[i]->wait(30s);
    EXPECT_TRUE(client_exit.ok()) << "client " << i << ": " << client_exit.describe() << "\n"
                                  << client_exit.output;
    EXPECT_TRUE(server_exit.ok()) << "server " << i << ": " << server_exit.describe() << "\n"
                                  << server_exit.output;
    outputs[i] = server_exit.output;
  }
  return outputs;
}

class SeveralUsers : public ::testing::TestWithParam<Pingpong> {
 protected:
  void SetUp() override {
    if (!nobody_.ok()) GTEST_SKIP() << nobody_.reason();
  }
  std::vector<std::string> server_args(int port) const {
    return rdmakit::testing::words(GetParam().program + " -n 200 -p " + std::to_string(port));
  }
  std::vector<std::string> client_args(int port, const std::string& server) const {
    return concat(server_args(port), {server});
  }
  OtherUser nobody_;
};

// A pingpong of the other user (nobody) serving this user's client on one host: the two
// QPs are in different ranges, so the client reaches the server's QP through TCP.
TEST_P(SeveralUsers, AQpOfAnotherUserOnThisHostIsReachedThroughItsListener) {
  const int port = rdmakit::testing::free_tcp_port();
  Process server(concat(nobody_.softrdma_run(), server_args(port)), nobody_.env());
  ASSERT_TRUE(rdmakit::testing::wait_listening(port, 10s)) << "server did not listen";
  const Exit client =
      rdmakit::testing::run(concat({SOFTRDMA_RUN}, client_args(port, "127.0.0.1")), 60s);
  const Exit served = server.wait(30s);
  ASSERT_TRUE(client.ok()) << client.describe() << "\n" << client.output;
  ASSERT_TRUE(served.ok()) << served.describe() << "\n" << served.output;
  EXPECT_GE(local_qpn_range(client.output), 0) << client.output;
  EXPECT_GE(local_qpn_range(served.output), 0) << served.output;
  EXPECT_NE(local_qpn_range(client.output), local_qpn_range(served.output));
}

// Three servers on one host, two of root and one of nobody, reached from another host at
// once: every pair completes with its data checked (-c), whichever process of its user each
// connection lands in.
TEST_P(SeveralUsers, TwoUsersOnOneHostServeAnotherHostAtOnce) {
  rdmakit::testing::TwoHosts hosts;
  if (!hosts.ok()) GTEST_SKIP() << "no network namespaces here: " << hosts.reason();
  const std::vector<std::string> served = serve_from_two_users(
      hosts, nobody_, [&](int port) { return server_args(port); },
      [&](int port, const std::string& host) { return client_args(port, host); });
  EXPECT_EQ(local_qpn_range(served[0]), local_qpn_range(served[1])) << "one user, one range";
  EXPECT_NE(local_qpn_range(served[0]), local_qpn_range(served[2]))
      << "another user, another range";
}

// The range of a registry whose file is gone (a removed test registry) is taken over by the
// next new registry, which tries this user's candidate ranges in the same order; live
// registries keep theirs.
TEST(QpNumberRanges, EachRegistryHasItsOwnAndARemovedOnesIsTakenOver) {
  const std::string base = "/dev/shm/softrdma-ranges-test-" + std::to_string(getpid()) + "-";
  // The server prints its own address (line-buffered: it is killed), then waits for a
  // client that never comes.
  const auto range_of = [&](const std::string& registry) {
    const Exit e = rdmakit::testing::run(
        {"timeout", "1", SOFTRDMA_RUN, "stdbuf", "-oL", "ibv_ud_pingpong", "-g", "0", "-p",
         std::to_string(rdmakit::testing::free_tcp_port())},
        10s, {"SOFTRDMA_REGISTRY=" + base + registry, "SOFTRDMA_DEVICE_VIEW=0"});
    return local_qpn_range(e.output);
  };
  const long a = range_of("a"), b = range_of("b");
  EXPECT_GE(a, 0);
  EXPECT_GE(b, 0);
  EXPECT_NE(a, b);
  EXPECT_EQ(range_of("a"), a) << "a registry keeps its range";
  unlink((base + "a").c_str());
  const long c = range_of("c");
  EXPECT_EQ(c, a) << "the first free candidate is taken: a's";
  EXPECT_NE(c, b);
  for (const char* r : {"b", "c"}) unlink((base + r).c_str());
}

// A table full of slots of a process that ended without destroying its QPs (as a crash
// leaves it), reclaimed by two processes at once: each slot goes to one of them only. Two
// processes judging one dead owner's slot free could both take it, the second taking it
// from the first just after it made the slot live (its QP then answered for another's).
TEST(QpTable, TwoProcessesReclaimingADeadOwnersSlotsNeverShareOne) {
  const std::string registry = "/dev/shm/softrdma-reclaim-test-" + std::to_string(getpid());
  const std::vector<std::string> env = {"SOFTRDMA_REGISTRY=" + registry, "SOFTRDMA_DEVICE_VIEW=0"};
  struct Cleanup {
    std::string path;
    ~Cleanup() { unlink(path.c_str()); }
  } cleanup{registry};
  constexpr int kTableSize = 16384;  // Registry::kQpCapacity
  const Exit filled = rdmakit::testing::run(
      {SOFTRDMA_RUN, QP_CLAIMER, std::to_string(kTableSize), "leave"}, 60s, env);
  ASSERT_TRUE(filled.ok()) << filled.describe() << "\n" << filled.output;
  ASSERT_THAT(filled.output, ::testing::HasSubstr("created " + std::to_string(kTableSize)));

  constexpr int kEach = 3000;
  const std::vector<std::string> claim = {SOFTRDMA_RUN, QP_CLAIMER, std::to_string(kEach), "hold",
                                          "2000"};  // both hold theirs while the other claims
  Process first(claim, env), second(claim, env);
  const Exit a = first.wait(60s), b = second.wait(60s);
  ASSERT_TRUE(a.ok()) << a.describe() << "\n" << a.output;
  ASSERT_TRUE(b.ok()) << b.describe() << "\n" << b.output;
  const auto qpns = [](const std::string& output) {
    std::set<unsigned long> numbers;
    const std::regex line(R"(qpn (\d+))");
    for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it)
      numbers.insert(std::stoul((*it)[1].str()));
    return numbers;
  };
  const std::set<unsigned long> of_a = qpns(a.output), of_b = qpns(b.output);
  EXPECT_EQ(of_a.size(), size_t{kEach});
  EXPECT_EQ(of_b.size(), size_t{kEach});
  std::vector<unsigned long> shared;
  std::set_intersection(of_a.begin(), of_a.end(), of_b.begin(), of_b.end(),
                        std::back_inserter(shared));
  EXPECT_TRUE(shared.empty()) << shared.size() << " QP numbers held by both, the first "
                              << shared.front();
}

// Three servers on one host (two of root, one of nobody) and three clients on another, each
// streaming 20000 WRITE + SEND pairs with 64 in flight: every server sees its messages in
// order, each after its WRITE.
TEST(RcOrder, SeveralProcessesPerHostEachSeeTheirStreamInOrder) {
  OtherUser nobody;
  if (!nobody.ok()) GTEST_SKIP() << nobody.reason();
  rdmakit::testing::TwoHosts hosts;
  if (!hosts.ok()) GTEST_SKIP() << "no network namespaces here: " << hosts.reason();
  const std::vector<std::string> served = serve_from_two_users(
      hosts, nobody,
      [](int port) {
        return std::vector<std::string>{RC_ORDER_CHECK, "server", std::to_string(port)};
      },
      [](int port, const std::string& host) {
        return std::vector<std::string>{RC_ORDER_CHECK, "client", host, std::to_string(port),
                                        "20000"};
      });
  for (const std::string& output : served)
    EXPECT_THAT(output, ::testing::HasSubstr("20000 messages: ok"));
}

INSTANTIATE_TEST_SUITE_P(Pingpongs, SeveralUsers,
                         ::testing::Values(Pingpong{"rc", "ibv_rc_pingpong -g 0 -c -s 4096"},
                                           Pingpong{"ud", "ibv_ud_pingpong -g 0 -c -s 1024"}),
                         [](const auto& param_info) { return param_info.param.name; });

}  // namespace

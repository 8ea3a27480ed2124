// softrdma under attack from the network: hosts that are not a QP's connected peer, and
// users of a host that try to take softrdma's port or files from another. Hosts are network
// namespaces; the attacks are tests/hostile_peer's parts and small programs of their own.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support/listening.hpp"
#include "support/other_user.hpp"
#include "support/subprocess.hpp"
#include "support/switched_hosts.hpp"

using namespace std::chrono_literals;
using rdmakit::testing::Exit;
using rdmakit::testing::Process;

namespace {

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The numbers a part printed as "name=value" on the line that starts with `prefix`.
std::map<std::string, unsigned long long> fields(const std::string& output,
                                                 const std::string& prefix) {
  std::map<std::string, unsigned long long> found;
  std::smatch line;
  if (!std::regex_search(output, line, std::regex("(^|\n)" + prefix + "[^\n]*"))) return found;
  const std::string text = line.str();
  const std::regex field(R"((\w+)=(\d+))");
  for (std::sregex_iterator it(text.begin(), text.end(), field), end; it != end; ++it)
    found[(*it)[1].str()] = std::stoull((*it)[2].str());
  return found;
}

// The last value of device counter `name` a victim printed.
unsigned long long last_counter(const std::string& output, const std::string& name) {
  unsigned long long value = 0;
  const std::regex line("counter " + name + R"(=(\d+))");
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it)
    value = std::stoull((*it)[1].str());
  return value;
}

unsigned long long first_counter(const std::string& output, const std::string& name) {
  std::smatch m;
  return std::regex_search(output, m, std::regex("counter " + name + R"(=(\d+))"))
             ? std::stoull(m[1].str())
             : 0;
}

class ThirdHost : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!hosts_.ok()) GTEST_SKIP() << "no network namespaces here: " << hosts_.reason();
  }
  std::vector<std::string> on(int host, const std::vector<std::string>& argv) const {
    return concat(concat(hosts_.on(host), {SOFTRDMA_RUN, HOSTILE_PEER}), argv);
  }
  rdmakit::testing::SwitchedHosts hosts_{3};
};

// A third host that knows the victim QP's number, its rkey and address, and every PSN
// within 512 of the one it expects, forges WRITE, READ, fetch-and-add and SEND as from its
// peer: none is carried out, and the victim's memory and receives are only the peer's. It
// then forges acknowledgements of the peer's WRITE while the victim is stopped: the WRITE
// completes only once the victim runs again. The peer's traffic completes with its data
// throughout, and the device counts what it refused.
TEST_F(ThirdHost, ForgedRequestsAndAcknowledgementsAreRefusedAndCounted) {
  const int port = 18600;  // the hosts' own port space
  Process victim(on(0, {"victim", std::to_string(port)}));
  ASSERT_TRUE(rdmakit::testing::wait_listening(port, 20s, victim.pid()));
  Process client(on(1, {"client", hosts_.address(0), std::to_string(port)}));
  ASSERT_TRUE(client.printed("client qpn=", 20s)) << client.output_so_far();
  ASSERT_TRUE(victim.printed("counter out_of_sequence=", 5s)) << victim.output_so_far();
  const std::string victim_line = victim.output_so_far(), client_line = client.output_so_far();
  const auto v = fields(victim_line, "victim");
  const auto c = fields(client_line, "client");
  ASSERT_TRUE(v.count("qpn") && v.count("rkey") && v.count("addr")) << victim_line;
  ASSERT_TRUE(c.count("qpn") && c.count("next_psn")) << client_line;

  const Exit forged =
      rdmakit::testing::run(on(2, {"forge", hosts_.address(0), std::to_string(v.at("qpn")),
                                   std::to_string(c.at("qpn")), std::to_string(v.at("rkey")),
                                   std::to_string(v.at("addr")), std::to_string(c.at("next_psn"))}),
                            120s);
  EXPECT_TRUE(forged.ok()) << forged.describe() << "\n" << forged.output;
  EXPECT_THAT(forged.output, ::testing::HasSubstr("forged 4096 executed 0"));

  // The victim stops; the client's WRITE waits for its answer; forged acknowledgements of
  // everything the client may send come from the third host.
  ASSERT_EQ(kill(victim.pid(), SIGSTOP), 0);
  ASSERT_EQ(kill(client.pid(), SIGUSR1), 0);
  ASSERT_TRUE(client.printed("write posted", 10s));
  const Exit acks =
      rdmakit::testing::run(on(2, {"forge-ack", hosts_.address(1), std::to_string(c.at("qpn")),
                                   std::to_string(v.at("qpn")), std::to_string(c.at("next_psn"))}),
                            60s);
  EXPECT_TRUE(acks.ok()) << acks.describe() << "\n" << acks.output;
  EXPECT_THAT(acks.output, ::testing::HasSubstr("forged 1024"));
  EXPECT_FALSE(client.printed("write done", 500ms))
      << "a forged acknowledgement completed a WRITE the victim never carried out";
  ASSERT_EQ(kill(victim.pid(), SIGCONT), 0);
  EXPECT_TRUE(client.printed("write done", 20s));
  ASSERT_EQ(kill(client.pid(), SIGUSR2), 0);

  const Exit client_exit = client.wait(60s);
  const Exit victim_exit = victim.wait(60s);
  EXPECT_TRUE(client_exit.ok()) << client_exit.describe() << "\n" << client_exit.output;
  EXPECT_TRUE(victim_exit.ok()) << victim_exit.describe() << "\n" << victim_exit.output;
  EXPECT_THAT(victim_exit.output, ::testing::HasSubstr("victim ok"));
  // The user's counters are the machine's (one registry for every namespace): at least the
  // refused requests of both forgers, whatever other tests add.
  EXPECT_GE(last_counter(victim_exit.output, "foreign_requests") -
                first_counter(victim_exit.output, "foreign_requests"),
            4096u + 1024u)
      << victim_exit.output;
}

}  // namespace

// softrdma under attack from the network: hosts that are not a QP's connected peer, and
// users of a host that try to take softrdma's port or files from another. Hosts are network
// namespaces; the attacks are tests/hostile_peer's parts and small programs of their own.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

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

// QPs whose PSNs do not match (the client starts ahead of, or behind, the PSN it told its
// peer) do not get through: the client's first request ends in IBV_WC_RETRY_EXC_ERR, as on
// a NIC, and the victim's memory holds nothing of it.
TEST_F(ThirdHost, QpsWhosePsnsDoNotMatchFailAsOnANic) {
  for (const char* offset : {"1", "16777215"}) {  // one ahead, one behind
    const int port = 18601;
    Process victim(on(0, {"victim", std::to_string(port)}));
    ASSERT_TRUE(rdmakit::testing::wait_listening(port, 20s, victim.pid()));
    const Exit client = rdmakit::testing::run(
        on(1, {"client", hosts_.address(0), std::to_string(port), offset}), 60s);
    EXPECT_EQ(client.code, 2) << client.describe() << "\n" << client.output;
    EXPECT_THAT(client.output, ::testing::HasSubstr("transport retry counter exceeded"))
        << "offset " << offset;
    victim.wait(10s);
  }
}

// Another user binds the port of this user's QP number range (in a host of its own here)
// before this user's process does: that process gets no QP (EADDRINUSE) and a notice naming
// the user, so no peer is ever given a QP number whose requests would go to that user's
// listener, and the squatter is sent nothing.
TEST(OtherUsers, APortAnotherUserHoldsIsNeverUsed) {
  rdmakit::testing::SwitchedHosts host(1);
  if (!host.ok()) GTEST_SKIP() << "no network namespaces here: " << host.reason();
  const std::string registry = "/dev/shm/softrdma-squat-test-" + std::to_string(getpid());
  const std::vector<std::string> env = {"SOFTRDMA_REGISTRY=" + registry};
  const auto claim_one = [&] {
    return rdmakit::testing::run(concat(host.on(0), {SOFTRDMA_RUN, QP_CLAIMER, "1", "hold", "0"}),
                                 30s, env);
  };
  const Exit first = claim_one();
  ASSERT_TRUE(first.ok()) << first.describe() << "\n" << first.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(first.output, m, std::regex(R"(qpn (\d+))"))) << first.output;
  const unsigned long range = (std::stoul(m[1].str()) - 0x100) / 16384;
  const int port = 4791 + static_cast<int>(range);

  Process squatter(
      concat(concat(host.on(0), rdmakit::testing::OtherUser::as_user()),
             {"/usr/bin/python3", "-c",
              "import socket; s = socket.socket(); s.bind(('0.0.0.0', " + std::to_string(port) +
                  ")); s.listen(); print('listening', flush=True); s.settimeout(20); s.accept(); "
                  "print('accepted', flush=True)"}));
  ASSERT_TRUE(squatter.printed("listening", 10s)) << squatter.output_so_far();
  const Exit second = claim_one();
  EXPECT_EQ(second.code, 1) << second.describe() << "\n" << second.output;
  EXPECT_THAT(second.output, ::testing::HasSubstr("Address already in use"));
  EXPECT_THAT(second.output, ::testing::HasSubstr("TCP port " + std::to_string(port)));
  EXPECT_THAT(second.output, ::testing::HasSubstr("held by user 65534"));
  EXPECT_FALSE(squatter.printed("accepted", 500ms)) << "the squatter was sent something";
  unlink(registry.c_str());
  std::filesystem::remove_all(registry + ".counters");
}

// Another user makes this user's registry file in /dev/shm first: it is refused, and this
// user's processes use one in $XDG_RUNTIME_DIR instead, or without one fail saying why. The
// user here is uid 23456, whom no other test plays; the files are the test's to remove.
TEST(OtherUsers, ARegistryFileAnotherUserMadeIsRefused) {
  rdmakit::testing::OtherUser copy;  // softrdma where every user may run it
  if (!copy.ok()) GTEST_SKIP() << copy.reason();
  const std::string uid = "23456";
  const std::string taken = "/dev/shm/softrdma-v16-" + uid;
  {
    std::ofstream planted(taken);  // root's, open to all: anyone could write "its" registry
  }
  ASSERT_EQ(chmod(taken.c_str(), 0666), 0);
  char runtime[] = "/tmp/softrdma-runtime-XXXXXX";
  ASSERT_NE(mkdtemp(runtime), nullptr);
  ASSERT_EQ(chown(runtime, 23456, 23456), 0);
  std::vector<std::string> as_user = {
      "setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", copy.softrdma_run().back()};
  // A server's QP is made before it waits for its client (which never comes: timeout ends it).
  const auto serve = [&](const std::string& runtime_dir) {
    const std::vector<std::string> env =
        runtime_dir.empty() ? std::vector<std::string>{"env", "-u", "XDG_RUNTIME_DIR"}
                            : std::vector<std::string>{"env", "XDG_RUNTIME_DIR=" + runtime_dir};
    return rdmakit::testing::run(
        concat(env, concat(as_user, {"timeout", "2", "ibv_rc_pingpong", "-g", "0", "-p", "18611"})),
        30s, copy.env());
  };
  const Exit refused = serve("");
  EXPECT_NE(refused.code, 124) << "it got a device all the same:\n" << refused.output;
  EXPECT_THAT(refused.output, ::testing::HasSubstr(taken + " was made by another user"));
  const Exit fallback = serve(runtime);
  EXPECT_EQ(fallback.code, 124) << "the server did not get to wait for its client:\n"
                                << fallback.output;
  struct stat st {};
  EXPECT_EQ(stat((std::string(runtime) + "/softrdma-v16").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Every file the user's softrdma made in /dev/shm is the user's alone.
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    struct stat f {};
    if (lstat(entry.path().c_str(), &f) != 0 || f.st_uid != 23456) continue;
    EXPECT_EQ(f.st_mode & 077, 0u) << entry.path() << " is open to others";
    std::filesystem::remove_all(entry.path());
  }
  unlink(taken.c_str());
  std::filesystem::remove_all(runtime);
}

}  // namespace

// Shared by the RPC tests: a fresh URL per test on the transport under test, and bounded
// polling of a server and its clients from one thread.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rdmakit/rpc/client.hpp"
#include "rdmakit/rpc/server.hpp"

namespace rdmakit::rpc::testing {

inline std::span<const std::byte> bytes(std::string_view s) {
  return std::as_bytes(std::span(s));
}
inline std::string text(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

/// A URL nobody uses yet on `scheme` (inproc, shm, tcp, rc, rc+tcp, ud).
inline std::string fresh_url(const std::string& scheme) {
  static int counter = 0;
  const std::string name = "rpc-test-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
  if (scheme == "tcp" || scheme == "rc" || scheme == "rc+tcp" || scheme == "ud")
    return scheme + "://127.0.0.1:0";
  return scheme + "://" + name;
}

/// A client of `server`, which this thread polls while the client connects: the RDMA
/// transports' handshakes need the server's side to run.
inline Client connect_to(Server& server, const Options& options = {}) {
  auto connecting =
      std::async(std::launch::async, [&] { return Client::connect(server.url(), options); });
  while (connecting.wait_for(std::chrono::seconds(0)) != std::future_status::ready) server.poll();
  return connecting.get();
}

/// How long a test waits for traffic that should finish: sanitizer builds run the data
/// path several times slower (80 MiB through UD datagrams took 12 s under TSan on CI, and
/// 43 s once with the machine in its slow mode, past a 40 s limit).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr std::chrono::seconds kTrafficLimit{90};  // under ctest's 120 s per test
#else
inline constexpr std::chrono::seconds kTrafficLimit{10};
#endif

/// Polls `server` and `clients` (callbacks go to `on_response`) until `done()` or `limit`.
template <typename Done>
bool poll_until(Endpoint& server, std::vector<Endpoint*> clients, Done&& done,
                const std::function<void(const Response&)>& on_response = {},
                std::chrono::milliseconds limit = kTrafficLimit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  auto cb = [&](const Response& r) {
    if (on_response) on_response(r);
  };
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    server.poll(cb);
    for (Endpoint* c : clients) c->poll(cb);
  }
  return true;
}

/// A client connecting now is served by `server` (polled from this thread): one call answered.
inline void expect_new_client_served(Server& server, const Options& options = {}) {
  Options client_options = options;
  client_options.on_session = nullptr;  // the server's callback: not for a client connecting
  Client other = connect_to(server, client_options);  // on another thread

  ASSERT_TRUE(other.call(bytes("still there?"), 1).ok());
  std::string answer;
  ASSERT_TRUE(poll_until(
      server, {&other},
      [&] {
        while (auto h = server.recv()) EXPECT_FALSE(std::move(*h).reply(bytes("served")));
        return !answer.empty();
      },
      [&](const Response& r) { answer = text(r.data); }));
  EXPECT_EQ(answer, "served");
}

/// `body` run in a fork()ed child that never returns into gtest, dies with the test process
/// (a test that times out leaves none behind), and is killed and reaped when this goes.
class ChildProcess {
 public:
  template <typename Body>
  explicit ChildProcess(Body&& body) {
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);  // the parent died before the line above
      body();
      _exit(0);
    }
  }
  ~ChildProcess() { kill_and_reap(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  void kill_and_reap() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

/// Hands a server's URL to a client process forked before the server exists. A child is
/// best forked before this process starts any transport thread: a fork while another
/// thread holds a lock the child needs (the sanitizer runtime's allocator's, for one)
/// leaves the child stuck.
class UrlPipe {
 public:
  UrlPipe() {
    if (pipe(fds_) != 0) fds_[0] = fds_[1] = -1;
  }
  ~UrlPipe() {
    close_end(0);
    close_end(1);
  }
  UrlPipe(const UrlPipe&) = delete;
  UrlPipe& operator=(const UrlPipe&) = delete;

  bool ok() const { return fds_[0] >= 0; }
  /// In the child: waits for the URL; ends the child (status 2) if none comes.
  std::string receive() {
    close_end(1);
    char url[256] = {};
    if (read(fds_[0], url, sizeof url - 1) <= 0) _exit(2);
    return url;
  }
  /// In the parent: sends `url`; true if it was written whole.
  bool send(const std::string& url) {
    close_end(0);
    const bool sent = write(fds_[1], url.data(), url.size()) == static_cast<ssize_t>(url.size());
    close_end(1);
    return sent;
  }

 private:
  void close_end(int end) {
    if (fds_[end] >= 0) close(fds_[end]);
    fds_[end] = -1;
  }
  int fds_[2];
};

class RpcTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string url() { return fresh_url(GetParam()); }
};

inline std::string transport_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '+', '_');
  return name;
}

/// Every transport, for the tests of behaviour they all share.
inline auto all_transports() {
  return ::testing::Values("inproc", "shm", "tcp", "rc", "rc+tcp", "ud");
}

}  // namespace rdmakit::rpc::testing

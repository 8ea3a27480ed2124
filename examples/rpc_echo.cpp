// A first RPC service and its client, over any rdmakit rpc transport:
//   rpc_echo server URL [--sessions N]   serves until interrupted (or N clients have left)
//   rpc_echo client URL [--calls N]
// URL: inproc://NAME (both in one process: `rpc_echo both inproc://echo`), shm://NAME,
// tcp://HOST:PORT. The service has two methods:
//   kEcho   replied at once, from the handler, with the request's bytes;
//   kUpper  deferred: the handler keeps a token and the server replies later, in the
//           reverse order of arrival (replies may go out in any order).
// The client calls both, first with callbacks (call + poll), then from a coroutine.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "rdmakit/rpc/client.hpp"
#include "rdmakit/rpc/server.hpp"
#include "rdmakit/task.hpp"

using namespace rdmakit;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kEcho = 1;
constexpr uint32_t kUpper = 2;

std::atomic<bool> stop{false};

std::span<const std::byte> bytes(std::string_view s) {
  return std::as_bytes(std::span(s));
}
std::string_view text(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

void serve(rpc::Server& server) {
  std::vector<rpc::RequestToken> deferred;
  server.handle(kEcho, [](rpc::RecvHandle request) {
    // data() is the request where it arrived; reply() copies it once into the send space.
    const std::span<const std::byte> in = request.data();
    std::move(request).reply(in);
  });
  server.handle(kUpper, [&](rpc::RecvHandle request) {
    deferred.push_back(std::move(request).into_token());
  });
  while (!stop) {
    server.wait(100ms);  // busy-polls, or sleeps in Mode::blocking
    // Answer the deferred ones newest first, building each reply in place.
    while (!deferred.empty()) {
      rpc::RequestToken token = std::move(deferred.back());
      deferred.pop_back();
      const std::string_view in = text(token.data());
      server.reply_with(std::move(token), in.size(), [&](std::span<std::byte> out) {
        std::transform(in.begin(), in.end(), reinterpret_cast<char*>(out.data()),
                       [](char c) { return static_cast<char>(std::toupper(c)); });
      });
    }
  }
}

rdmakit::Task<int> coroutine_calls(rpc::Client& client, int calls) {
  int ok = 0;
  for (int i = 0; i < calls; ++i) {
    rpc::CallOptions upper;
    upper.method = kUpper;
    upper.timeout = 2s;
    const std::string word = "coroutine call " + std::to_string(i);
    rpc::Response r = co_await client.call(bytes(word), upper);  // no allocation per call
    if (r.status.ok() && text(r.data) == "COROUTINE CALL " + std::to_string(i)) ++ok;
  }
  co_return ok;
}

int run_client(const std::string& url, int calls) {
  rpc::Client client = rpc::Client::connect(url);
  // Callbacks: calls return at once; poll() delivers each response with its user_data.
  int answered = 0;
  int failed = 0;
  auto on_response = [&](const rpc::Response& r) {
    if (!r.status.ok()) {
      ++failed;
      std::printf("call %llu failed: %s (%.*s)\n", static_cast<unsigned long long>(r.user_data),
                  std::string(rpc::code_name(r.status.code)).c_str(),
                  static_cast<int>(r.status.message.size()), r.status.message.data());
      return;
    }
    ++answered;
    if (r.user_data < 4) {
      std::printf("call %llu -> \"%.*s\"\n", static_cast<unsigned long long>(r.user_data),
                  static_cast<int>(r.data.size()), reinterpret_cast<const char*>(r.data.data()));
    }
  };
  for (int i = 0; i < calls; ++i) {
    rpc::CallOptions o;
    o.method = i % 2 == 0 ? kEcho : kUpper;
    const std::string word = "word " + std::to_string(i);
    // A full window is not an error: make progress and try again.
    while (client.call(bytes(word), static_cast<uint64_t>(i), o).error == rpc::Errc::would_block)
      client.poll(on_response);
  }
  while (answered + failed < calls && client.connected()) client.wait(100ms, on_response);
  // The same from a coroutine.
  rdmakit::Task<int> task = coroutine_calls(client, calls);
  task.start();
  while (!task.done() && client.connected()) client.wait(100ms);
  const int coroutine_ok = task.done() ? task.result() : 0;
  std::printf("%d calls answered, %d failed; %d of %d coroutine calls answered correctly\n",
              answered, failed, coroutine_ok, calls);
  return failed == 0 && answered == calls && coroutine_ok == calls ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rpc_echo: a first rdmakit rpc service and its client"};
  std::string role, url;
  int calls = 1000;
  int sessions = 0;
  app.add_option("role", role, "server, client or both (both: the server on a thread)")
      ->required()
      ->check(CLI::IsMember({"server", "client", "both"}));
  app.add_option("url", url, "inproc://NAME, shm://NAME or tcp://HOST:PORT")->required();
  app.add_option("--calls", calls, "calls the client makes in each form");
  app.add_option("--sessions", sessions, "server: exit after this many clients have left");
  CLI11_PARSE(app, argc, argv);
  std::signal(SIGINT, [](int) { stop = true; });
  std::signal(SIGTERM, [](int) { stop = true; });
  try {
    if (role == "server") {
      int left = 0;
      rpc::Options options;
      options.on_session = [&](rpc::SessionId, rpc::SessionEvent e) {
        if (e == rpc::SessionEvent::closed && ++left == sessions) stop = true;
      };
      rpc::Server server = rpc::Server::listen(url, options);
      std::printf("serving on %s\n", server.url().c_str());
      std::fflush(stdout);
      serve(server);
      std::printf("served %d client%s\n", sessions, sessions == 1 ? "" : "s");
      return 0;
    }
    if (role == "client") return run_client(url, calls);
    rpc::Server server = rpc::Server::listen(url);
    const std::string where = server.url();
    std::thread serving([&] { serve(server); });
    const int status = run_client(where, calls);
    stop = true;
    serving.join();
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rpc_echo: %s\n", e.what());
    return 1;
  }
}

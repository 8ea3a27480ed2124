// `rdmakit kv`: the three modes (serve, client, both in one process) put together.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <csignal>
#include <exception>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kv_client.hpp"
#include "kv_options.hpp"
#include "kv_report.hpp"
#include "kv_server.hpp"

namespace rdmakit::tool {
namespace {

using namespace std::chrono_literals;

std::atomic<bool> interrupted{false};

// The host of a scheme://HOST:PORT URL, where a --one-sided client also finds the server's
// RDMA acceptor; loopback for URLs without a host and port (inproc://, shm://).
std::string host_of(const std::string& url) {
  const size_t scheme = url.find("://");
  const std::string rest = scheme == std::string::npos ? url : url.substr(scheme + 3);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size()) return "127.0.0.1";
  const std::string port = rest.substr(colon + 1);
  if (!std::all_of(port.begin(), port.end(), [](char c) { return std::isdigit(c) != 0; }))
    return "127.0.0.1";
  std::string host = rest.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host == "0.0.0.0" || host == "::" || host == "*") return "127.0.0.1";
  return host;
}

kv::ServerConfig server_config(const KvOptions& o) {
  return {o.url, o.keys, o.value_size, o.rdma_port, o.mode};
}

// --local: the server on a thread of this process.
struct LocalServer {
  explicit LocalServer(const KvOptions& o)
      : server(server_config(o)), thread([this] { server.serve(stop); }) {}
  ~LocalServer() {
    stop = true;
    thread.join();
  }
  kv::Server server;
  std::atomic<bool> stop{false};
  std::thread thread;
};

void serve(const KvOptions& o) {
  kv::Server server(server_config(o));
  kv::print_serving(o, server.url(), server.rdma_port());
  std::thread timer;
  if (o.duration > 0) {
    timer = std::thread([&o] {
      const auto until = std::chrono::steady_clock::now() +
                         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(o.duration));
      while (!interrupted && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(20ms);
      interrupted = true;
    });
  }
  server.serve(interrupted);
  if (timer.joinable()) timer.join();
}

}  // namespace

void run_kv(KvOptions& o) {
  std::signal(SIGINT, [](int) { interrupted = true; });
  std::signal(SIGTERM, [](int) { interrupted = true; });
  if (o.serve) return serve(o);

  std::optional<LocalServer> local;
  std::string url = o.url;
  if (o.local || o.url.rfind("inproc://", 0) == 0) {
    local.emplace(o);
    url = local->server.url();
  }
  const double seconds = o.duration > 0 ? o.duration : 2.0;
  const auto grant_seconds = o.one_sided ? static_cast<uint32_t>(seconds) + 60 : 0u;
  const kv::TableInfo info = kv::describe(url, grant_seconds, o.clients);
  if (info.keys < o.keys)
    throw std::runtime_error("the server holds keys 0 .. " + std::to_string(info.keys - 1) +
                             ": run with --keys " + std::to_string(info.keys) + " or fewer");
  if (info.value_capacity < o.value_size)
    throw std::runtime_error("the server takes values up to " +
                             std::to_string(info.value_capacity) + " B");
  if (o.one_sided && (info.rdma_port == 0 || info.table.empty()))
    throw std::runtime_error("the server granted no access to its table");

  const kv::KeyChooser keys(o.keys, o.distribution, o.zipf_theta);
  kv::Writers writers(info.first_writer, o.clients, o.keys);
  kv::ClientPlan plan;
  plan.options = &o;
  plan.url = url;
  plan.rdma_host = o.rdma_host.empty() ? host_of(url) : o.rdma_host;
  plan.info = info;
  plan.keys = &keys;
  plan.writers = &writers;

  std::vector<kv::ClientStats> stats(o.clients);
  std::vector<std::exception_ptr> failures(o.clients);
  std::vector<std::thread> threads;
  for (uint32_t k = 0; k < o.clients; ++k) {
    threads.emplace_back([&, k] {
      try {
        kv::run_client(plan, k, stats[k]);
      } catch (...) {
        failures[k] = std::current_exception();  // reported by the main thread
      }
    });
  }
  for (std::thread& t : threads) t.join();
  local.reset();
  for (const std::exception_ptr& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }

  const kv::RunResult result = kv::RunResult::merge(url, stats);
  kv::print_result(o, result);
  if (result.errors() != 0) throw std::runtime_error("the run failed its checks (see above)");
  if (result.ops == 0) throw std::runtime_error("no operation completed");
}

}  // namespace rdmakit::tool

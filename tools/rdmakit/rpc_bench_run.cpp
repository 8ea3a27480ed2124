// rpc-bench's server and client loops. Each client thread drives its sessions with `depth`
// calls in flight, reissuing from the response callback. Round trips are timed from call to
// callback: every one in the latency test; in the others only the calls of the first slot,
// since reading the clock costs as much as a call.
#include <csignal>
#include <cstring>
#include <exception>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "perf_stats.hpp"
#include "rdmakit/rpc/client.hpp"
#include "rdmakit/rpc/server.hpp"
#include "rpc_bench.hpp"
#include "rpc_bench_report.hpp"
#include "rpc_connect.hpp"

namespace rdmakit::tool {
namespace {

using namespace std::chrono_literals;

std::atomic<bool> interrupted{false};

// Server thread k listens on: tcp, the same address (the kernel spreads the connections);
// shm and inproc, NAME.k (k > 0).
std::string server_url(const std::string& url, uint32_t k) {
  if (k == 0 || url.rfind("tcp://", 0) == 0) return url;
  return url + "." + std::to_string(k);
}

// A server admits clients whose window is at most its own: it takes the largest depth.
constexpr uint32_t kServerWindow = 4096;

rpc::Options endpoint_options(const RpcBenchOptions& o, uint64_t response, bool server) {
  rpc::Options options;
  options.mode = o.mode;
  options.window = server ? kServerWindow : o.depth;
  if (o.ring_bytes != 0) options.ring_bytes = o.ring_bytes;
  const uint64_t largest = std::max<uint64_t>(o.size, response);
  options.max_message_bytes = static_cast<uint32_t>(std::max<uint64_t>(largest, 16u << 20));
  options.default_timeout = 0ms;  // a benchmark waits for every reply
  return options;
}

// Every request of 8 bytes or more starts with a number its client gives each call, rising
// per session; every reply of 8 bytes or more starts with the number of its request, so the
// client sees a reply to another call, and the server sees a request that runs twice.
uint64_t call_number(std::span<const std::byte> bytes) {
  uint64_t n = 0;
  if (bytes.size() >= sizeof n) std::memcpy(&n, bytes.data(), sizeof n);
  return n;
}

// Replies with as many bytes as the caller reserved (rpc-bench clients reserve exactly the
// response size they want), or refuses a request whose number does not rise.
void serve_one(rpc::Server& server, const std::atomic<bool>& stop, bool blocking) {
  std::unordered_map<uint64_t, uint64_t> last_number;  // by session
  auto answer = [&] {
    while (auto h = server.recv()) {
      const uint64_t number = call_number(h->data());
      if (h->data().size() >= sizeof number) {
        const rpc::SessionId s = h->session();
        uint64_t& last = last_number[(uint64_t{s.generation} << 32) | s.index];
        if (number <= last) {
          std::move(*h).reply_error(rpc::Code::aborted, "request ran twice or out of order");
          continue;
        }
        last = number;
      }
      const uint32_t size = h->max_response();
      std::move(*h).reply_with(size, [number](std::span<std::byte> out) {
        if (!out.empty()) std::memset(out.data(), 0x5a, out.size());
        if (out.size() >= sizeof number) std::memcpy(out.data(), &number, sizeof number);
      });
    }
  };
  while (!stop.load(std::memory_order_relaxed) && !interrupted.load(std::memory_order_relaxed)) {
    if (blocking) {
      server.wait(50ms);
    } else {
      for (int i = 0; i < 256; ++i) server.poll(), answer();
    }
    answer();
  }
}

struct Servers {
  std::vector<std::thread> threads;
  std::atomic<bool> stop{false};
  std::string url;  // what clients connect to (thread 0's, with its real port)

  ~Servers() {
    stop = true;
    for (std::thread& t : threads) t.join();
  }
};

void start_servers(const RpcBenchOptions& o, uint64_t response, Servers& servers) {
  const rpc::Options options = endpoint_options(o, response, true);
  std::string url = o.url;
  for (uint32_t k = 0; k < o.threads; ++k) {
    rpc::Server server = rpc::Server::listen(server_url(url, k), options);
    if (k == 0) url = servers.url = server.url();  // a port 0 is now a real one
    servers.threads.emplace_back(
        [&servers, blocking = o.mode == rpc::Mode::blocking, s = std::move(server)]() mutable {
          serve_one(s, servers.stop, blocking);
        });
  }
}

struct ClientRun {
  Measurement measurement;
  uint64_t errors = 0;
  std::string first_error;
  uint64_t memory_per_peer = 0;
};

void drive(const RpcBenchOptions& o, const std::string& url, uint64_t response, ClientRun& run) {
  const rpc::Options options = endpoint_options(o, response, false);
  // One endpoint per thread, with a session per client: one poll round serves them all.
  rpc::Client client = connect_retrying(url, options);
  std::vector<rpc::SessionId> sessions{client.session()};
  while (sessions.size() < o.clients) sessions.push_back(client.open_session(url));
  run.memory_per_peer = client.session_memory_bytes() / sessions.size();
  std::vector<uint64_t> numbers(o.clients * o.depth);  // of each call in flight
  uint64_t next_number = 0;
  rpc::CallOptions call;
  call.max_response = static_cast<uint32_t>(response);

  const uint32_t calls = o.clients * o.depth;
  std::vector<Clock::time_point> started(calls);
  std::vector<uint32_t> unsent;  // calls refused for room, retried by the loop
  const bool every_call = o.test == RpcTest::latency;

  Clock::time_point now = Clock::now();
  const auto warmup = std::chrono::duration<double>(o.duration * 0.1);
  const auto measured = std::chrono::duration<double>(o.duration);
  const Clock::time_point measure_from = now + std::chrono::duration_cast<Clock::duration>(warmup);
  const Clock::time_point measure_until =
      measure_from + std::chrono::duration_cast<Clock::duration>(measured);
  bool measuring = false;
  uint64_t completed = 0;

  auto issue = [&](uint32_t index) {
    if (every_call || index == 0) started[index] = Clock::now();
    const uint64_t number = ++next_number;
    const auto fill = [&](std::span<std::byte> out) {
      std::memset(out.data(), 0x42, out.size());
      if (out.size() >= sizeof number) std::memcpy(out.data(), &number, sizeof number);
    };
    if (client.call_with(sessions[index / o.depth], o.size, fill, index, call).ok())
      numbers[index] = number;
    else
      unsent.push_back(index);
  };
  auto on_response = [&](const rpc::Response& r) {
    const auto index = static_cast<uint32_t>(r.user_data);
    if (!r.status.ok()) {
      if (run.errors++ == 0) run.first_error = std::string(r.status.message);
    } else if (r.data.size() >= sizeof(uint64_t) && call_number(r.data) != numbers[index]) {
      if (run.errors++ == 0) run.first_error = "a reply carries another call's number";
    } else if (measuring) {
      ++completed;
      if (every_call || index == 0) {
        const auto rtt = std::chrono::duration<double, std::micro>(Clock::now() - started[index]);
        run.measurement.latencies_usec.push_back(rtt.count());
      }
    }
    issue(index);
  };
  for (uint32_t i = 0; i < calls; ++i) issue(i);
  const bool counted = o.iterations != 0 && every_call;
  for (;;) {
    if (o.mode == rpc::Mode::blocking) {
      client.wait(10ms, on_response);
    } else {
      client.poll(on_response);
    }
    if (!unsent.empty()) {
      std::vector<uint32_t> retry;
      retry.swap(unsent);
      for (uint32_t i : retry) issue(i);
    }
    now = Clock::now();
    if (!measuring && now >= measure_from) {
      measuring = true;
      run.measurement.start = now;
    }
    const bool finished = counted ? completed >= o.iterations : now >= measure_until;
    if (measuring && finished) break;
    if (client.session_count() < sessions.size()) break;  // a session closed
    if (interrupted) break;
  }
  run.measurement.end = Clock::now();
  run.measurement.ops = completed;
}

}  // namespace

void run_rpc_bench(RpcBenchOptions& o) {
  if (o.size == 0) o.size = o.test == RpcTest::bandwidth ? (1u << 20) : 32;
  const uint64_t response = o.response_size >= 0           ? static_cast<uint64_t>(o.response_size)
                            : o.test == RpcTest::bandwidth ? 8
                                                           : o.size;
  if (o.test == RpcTest::latency && !o.serve) o.clients = 1, o.depth = 1;
  std::signal(SIGINT, [](int) { interrupted = true; });
  std::signal(SIGTERM, [](int) { interrupted = true; });

  if (o.serve) {
    Servers servers;
    start_servers(o, response, servers);
    RpcReport::serving(o, servers.url);
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(o.duration));
    while (!interrupted && (o.duration <= 0 || Clock::now() < until || o.duration >= 1e9))
      std::this_thread::sleep_for(20ms);
    return;
  }

  std::optional<Servers> servers;
  std::string url = o.url;
  if (o.local || o.url.rfind("inproc://", 0) == 0) {
    servers.emplace();
    start_servers(o, response, *servers);
    url = servers->url;
  }
  std::vector<ClientRun> runs(o.threads);
  std::vector<std::exception_ptr> failures(o.threads);
  std::vector<std::thread> threads;
  for (uint32_t k = 0; k < o.threads; ++k) {
    threads.emplace_back([&, k] {
      try {
        drive(o, server_url(url, k), response, runs[k]);
      } catch (...) {
        failures[k] = std::current_exception();  // reported by the main thread
      }
    });
  }
  for (std::thread& t : threads) t.join();
  servers.reset();
  for (const std::exception_ptr& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }

  std::vector<Measurement> measurements;
  RpcResult result;
  result.url = url;
  result.request_bytes = o.size;
  result.response_bytes = response;
  for (ClientRun& r : runs) {
    result.errors += r.errors;
    if (result.first_error.empty()) result.first_error = r.first_error;
    result.calls += r.measurement.ops;
    result.memory_per_peer = std::max(result.memory_per_peer, r.memory_per_peer);
    result.seconds =
        std::max(result.seconds,
                 std::chrono::duration<double>(r.measurement.end - r.measurement.start).count());
    measurements.push_back(std::move(r.measurement));
  }
  result.latency = latency(measurements);
  RpcReport::print(o, result);
  if (result.calls == 0) throw std::runtime_error("no call completed");
}

}  // namespace rdmakit::tool

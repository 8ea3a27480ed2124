// A coroutine echo server with many clients, all on one thread: one Poller over the completion
// queue every connection shares, one coroutine per connection. The client side opens its
// connections from one process the same way and checks every echo.
//
// Usage: coroutine_echo server [--port N] [--clients K]
//        coroutine_echo client HOST [--port N] [--clients K] [--messages M] [--size S]
// An empty message ends a connection.
#include <poll.h>

#include <CLI/CLI.hpp>

#include <chrono>
#include <coroutine>
#include <cstdio>
#include <cstring>
#include <deque>

#include "rdmakit/allocator.hpp"
#include "rdmakit/async_queue_pair.hpp"
#include "rdmakit/poller.hpp"
#include "rdmakit/tcp_connection.hpp"

using namespace rdmakit;

namespace {

constexpr size_t kMaxMessage = 64 * 1024;
// A peer silent for this long is given up (RC cannot tell a quiet peer from a dead one).
constexpr std::chrono::seconds kIdleLimit{30};

// Wakes a coroutine of this thread that waits for something another coroutine does: set()
// resumes the waiter, or lets the next co_await pass when nobody waits yet.
class Signal {
 public:
  bool await_ready() const noexcept { return set_; }
  void await_suspend(std::coroutine_handle<> waiter) noexcept { waiter_ = waiter; }
  void await_resume() noexcept { set_ = false; }
  void set() noexcept {
    set_ = true;
    if (waiter_) std::exchange(waiter_, {}).resume();
  }

 private:
  std::coroutine_handle<> waiter_;
  bool set_ = false;
};

// One connection, with its own receive and send buffers.
struct Peer {
  Peer(Poller& poller, Connection c, Allocation memory)
      : connection(std::move(c)), qp(poller, connection.qp()), buffers(std::move(memory)) {}
  Connection connection;
  AsyncQueuePair qp;
  Allocation buffers;
  Received received;
  Signal arrived;
};

Task<void> receive(Peer& peer, LocalBuffer into) {
  peer.received = co_await peer.qp.recv(into, {.timeout = kIdleLimit, .stop = nullptr});
  peer.arrived.set();
}

// A receive must be posted before the peer sends into it, so it cannot wait behind our own
// send in one coroutine: it runs in a coroutine of its own, posted at once (flush) before we
// send what the peer answers. `co_await peer.arrived` then waits for the message.
void expect_message(Poller& poller, Peer& peer, LocalBuffer into) {
  spawn(receive(peer, into));
  poller.flush();
}

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

int run_server(uint16_t port, int clients) {
  auto res = Resources::open();
  MemoryAllocator allocator(res->pd);
  Poller poller(res->cq);
  std::deque<Peer> peers;  // grows without moving the others
  int finished = 0, lost = 0;
  uint64_t echoed = 0;

  // Echoes each message from the buffer it arrived in, while the next one arrives in the other.
  // The first receive is posted once accept() has returned, and the client may send as soon as
  // its connect() returns: a first message that comes too early is retried by RC (receiver not
  // ready; rdmakit's default rnr_retry 7 retries forever). Every later receive is posted before
  // the echo that lets the client send again.
  auto echo = [&](Peer& peer) -> Task<void> {
    const LocalBuffer in[2] = {peer.buffers.buffer().first(kMaxMessage),
                               peer.buffers.buffer().subspan(kMaxMessage)};
    expect_message(poller, peer, in[0]);
    for (size_t i = 0;; ++i) {
      co_await peer.arrived;
      const Received got = peer.received;
      if (got.error) ++lost;
      if (got.error || got.byte_len == 0) break;  // a lost client, or its goodbye
      expect_message(poller, peer, in[(i + 1) % 2]);
      if (co_await peer.qp.send(in[i % 2].first(got.byte_len))) {
        ++lost;
        break;
      }
      ++echoed;
    }
    ++finished;
  };

  TcpAcceptor acceptor(res, "0.0.0.0", port);
  std::printf("server: listening on port %u for %d clients\n", acceptor.port(), clients);
  std::fflush(stdout);
  // One loop accepts new clients between polling rounds, so connected ones are served meanwhile.
  while (finished < clients) {
    if (std::ssize(peers) < clients && readable(acceptor.fd())) {
      Peer& peer = peers.emplace_back(poller, acceptor.accept(),
                                      allocator.allocate(2 * kMaxMessage, Purpose::recv));
      std::printf("server: client %zu connected: %s\n", peers.size(),
                  peer.connection.summary().c_str());
      spawn(echo(peer));
    }
    poller.poll();
  }
  // A failed send leaves the next receive posted; its flush completion ends it.
  poller.run_until([&] {
    for (Peer& peer : peers)
      if (peer.qp.in_flight() != 0) return false;
    return true;
  });
  std::printf("server: echoed %llu messages for %d clients, %d lost\n",
              static_cast<unsigned long long>(echoed), clients, lost);
  return lost == 0 ? 0 : 1;
}

int run_client(const std::string& host, uint16_t port, int clients, int messages, size_t size) {
  auto res = Resources::open();
  MemoryAllocator allocator(res->pd);
  Poller poller(res->cq);
  std::deque<Peer> peers;
  TcpConnector connector(res);
  for (int k = 0; k < clients; ++k)
    peers.emplace_back(poller, connector.connect(host, port),
                       allocator.allocate(2 * size, Purpose::general, Init::uninitialized));
  std::printf("client: %d connections: %s\n", clients, peers.front().connection.summary().c_str());

  int finished = 0;
  uint64_t round_trips = 0, wrong = 0;
  std::chrono::steady_clock::duration waited{};
  auto talk = [&](Peer& peer, size_t k) -> Task<void> {
    const auto [out, in] = peer.buffers.buffer().split(size);
    for (size_t m = 0; m < static_cast<size_t>(messages); ++m) {
      for (size_t i = 0; i < size; ++i) out.data()[i] = std::byte(k * 31 + m * 7 + i);
      const auto start = std::chrono::steady_clock::now();
      expect_message(poller, peer, in);  // before the message leaves: the echo may be quick
      const std::error_code sent = co_await peer.qp.send(out);
      co_await peer.arrived;
      waited += std::chrono::steady_clock::now() - start;
      const Received& echo = peer.received;
      if (sent || echo.error || echo.byte_len != size || std::memcmp(in.data(), out.data(), size)) {
        ++wrong;
        break;
      }
      ++round_trips;
    }
    (void)co_await peer.qp.send(out.first(0));  // goodbye
    ++finished;
  };

  const auto start = std::chrono::steady_clock::now();
  for (size_t k = 0; k < peers.size(); ++k) spawn(talk(peers[k], k));
  poller.run_until([&] { return finished == clients; });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "client: %llu round trips of %zu B in %.3f s: %.0f round trips/s, average %.2f us each\n",
      static_cast<unsigned long long>(round_trips), size, seconds,
      static_cast<double>(round_trips) / seconds,
      std::chrono::duration<double, std::micro>(waited).count() /
          static_cast<double>(std::max<uint64_t>(round_trips, 1)));
  if (wrong == 0)
    std::printf("client: every echo matched\n");
  else
    std::printf("client: %llu connections FAILED or got a wrong echo\n",
                static_cast<unsigned long long>(wrong));
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string host;
  uint16_t port = 7473;
  int clients = 8, messages = 1000;
  size_t size = 64;
  CLI::App app("A coroutine echo server with many clients, on one thread");
  app.require_subcommand(1);
  CLI::App* server = app.add_subcommand("server", "echo what K clients send");
  CLI::App* client = app.add_subcommand("client", "K connections sending M messages each");
  client->add_option("host", host, "the server's address")->required();
  for (CLI::App* mode : {server, client}) {
    mode->add_option("--port", port, "TCP port")->capture_default_str();
    mode->add_option("--clients", clients, "connections")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
  }
  client->add_option("--messages", messages, "messages per connection")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  client->add_option("--size", size, "bytes per message")
      ->check(CLI::Range(size_t{1}, kMaxMessage))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return server->parsed() ? run_server(port, clients)
                            : run_client(host, port, clients, messages, size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coroutine_echo: %s\n", e.what());
    return 1;
  }
}

// The workflow of rdma_client_server.cpp, written with rdmakit. The server offers a registered
// buffer in the connection handshake and waits for "done"; the client runs timed loops of RDMA
// WRITE and READ against it from coroutines, checks the data and prints bandwidth and latency.
//
// Usage: rdmakit_client_server server [--cm] [--port N] [--bind ADDR]
//        rdmakit_client_server client HOST [--cm] [--port N] [--size BYTES] [--iterations N]
// --cm connects through the RDMA CM instead of rdmakit's TCP handshake.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "rdmakit/allocator.hpp"
#include "rdmakit/async_queue_pair.hpp"
#include "rdmakit/cm_connection.hpp"
#include "rdmakit/poller.hpp"
#include "rdmakit/tcp_connection.hpp"

using namespace rdmakit;

namespace {

constexpr size_t kServerBuffer = size_t{1} << 20;
constexpr int kDepth = 16;  // operations in flight in the bandwidth loops

struct Options {
  bool cm = false;
  std::string host, bind = "0.0.0.0";
  uint16_t port = 7471;
  size_t size = kServerBuffer;
  int iterations = 1000;
};

std::shared_ptr<Resources> open_resources(bool cm, bool completion_channel) {
  ResourceOptions options;
  options.for_rdma_cm = cm;  // the RDMA CM hands out its own device context
  options.completion_channel = completion_channel;
  return Resources::open(options);
}

template <typename AcceptorT>
Connection accept_one(std::shared_ptr<Resources> res, const Options& o, ConnectionOptions options) {
  AcceptorT acceptor(std::move(res), o.bind, o.port, std::move(options));
  std::printf("server: listening on %s port %u\n", o.bind.c_str(), acceptor.port());
  std::fflush(stdout);
  return acceptor.accept();
}

int run_server(const Options& o) {
  // The server only waits for "done": it sleeps on a completion channel instead of polling.
  auto res = open_resources(o.cm, /*completion_channel=*/true);
  MemoryAllocator allocator(res->pd);
  Allocation buffer = allocator.allocate(
      kServerBuffer, Access::local_write | Access::remote_read | Access::remote_write);
  Allocation note = allocator.allocate(64, Purpose::recv);

  // Where the buffer is travels in the handshake (28 bytes): no message of our own needed.
  ConnectionOptions options;
  options.user_data.resize(RemoteBuffer::kWireSize);
  buffer.remote().encode(std::span<std::byte, RemoteBuffer::kWireSize>(options.user_data));
  Connection connection =
      o.cm ? accept_one<CmAcceptor>(res, o, options) : accept_one<TcpAcceptor>(res, o, options);
  std::printf("server: client connected: %s\n", connection.summary().c_str());

  // "done" comes after the client's loops; were this receive late anyway, RC would retry the
  // send (rnr_retry 7: forever) rather than fail it.
  Poller poller(res->cq, res->channel.get());
  AsyncQueuePair qp(poller, connection.qp());
  auto wait_for_done = [&]() -> Task<Received> { co_return co_await qp.recv(note.buffer()); };
  Task<Received> done = wait_for_done();
  done.start();
  while (!done.done()) poller.wait(std::chrono::seconds(1));
  const Received got = done.result();
  const std::string said(reinterpret_cast<const char*>(note.data()), got.byte_len);
  if (got.error) std::fprintf(stderr, "server: receive failed: %s\n", got.error.message().c_str());
  std::printf("server: client said \"%s\"\n", said.c_str());
  return !got.error && said == "done" ? 0 : 1;
}

// Runs `iterations` operations made by `op`: one at a time for the latency, then from kDepth
// coroutines at once for the bandwidth. Prints both; false if an operation failed.
bool timed_loop(Poller& poller, const char* name, size_t size, int iterations, auto op) {
  std::error_code error;
  int left = 0, running = 0;
  auto worker = [&]() -> Task<void> {
    while (left-- > 0 && !error) {
      const std::error_code ec = co_await op();
      if (ec) error = ec;
    }
    --running;
  };
  auto seconds_with = [&](int depth) {
    left = iterations;
    running = depth;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < depth; ++i) spawn(worker());
    poller.run_until([&] { return running == 0; });
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const double latency_us = seconds_with(1) / iterations * 1e6;
  const double mib_per_s =
      static_cast<double>(size) * iterations / seconds_with(kDepth) / (1 << 20);
  if (error) {
    std::fprintf(stderr, "client: RDMA %s failed: %s\n", name, error.message().c_str());
    return false;
  }
  std::printf("client: RDMA %-5s %8zu B x %d: latency %8.2f us, bandwidth %9.1f MiB/s\n", name,
              size, iterations, latency_us, mib_per_s);
  return true;
}

int run_client(const Options& o) {
  auto res = open_resources(o.cm, /*completion_channel=*/false);
  Connection connection =
      o.cm ? CmConnector(res).connect(o.host, o.port) : TcpConnector(res).connect(o.host, o.port);
  std::printf("client: connected: %s\n", connection.summary().c_str());
  if (connection.peer_data().size() != RemoteBuffer::kWireSize)
    throw std::runtime_error("the server offered no buffer");
  const RemoteBuffer server = RemoteBuffer::decode(
      std::span<const std::byte, RemoteBuffer::kWireSize>(connection.peer_data()));
  std::printf("client: server buffer at 0x%llx, rkey 0x%x, %llu bytes\n",
              static_cast<unsigned long long>(server.address()), server.rkey(),
              static_cast<unsigned long long>(server.size()));
  if (server.size() < o.size)
    throw std::runtime_error("the server's buffer is smaller than --size");

  MemoryAllocator allocator(res->pd);
  Allocation source = allocator.allocate(o.size, Purpose::send);
  Allocation sink = allocator.allocate(o.size, Purpose::recv);
  Poller poller(res->cq);  // busy polling: this thread has nothing else to do
  AsyncQueuePair qp(poller, connection.qp());

  // Transfers of 4 KiB, 64 KiB, ... and --size.
  bool ok = true;
  for (size_t size = std::min<size_t>(4096, o.size), round = 1; ok; size *= 16, ++round) {
    size = std::min(size, o.size);
    // A new pattern each round: what the last round left in the server's buffer cannot pass.
    for (size_t i = 0; i < size; ++i) source.data()[i] = std::byte(i * 7 + round);
    std::memset(sink.data(), 0, size);
    const LocalBuffer from = source.buffer().first(size), into = sink.buffer().first(size);
    const RemoteBuffer there = server.first(size);
    ok = timed_loop(poller, "WRITE", size, o.iterations, [&] { return qp.write(from, there); }) &&
         timed_loop(poller, "READ", size, o.iterations, [&] { return qp.read(into, there); }) &&
         std::memcmp(source.data(), sink.data(), size) == 0;
    if (size == o.size) break;
  }
  std::printf("client: data read back %s what was written\n", ok ? "matches" : "DIFFERS FROM");

  std::memcpy(source.data(), "done", 4);
  auto say_done = [&]() -> Task<std::error_code> {
    co_return co_await qp.send(source.buffer().first(4));
  };
  Task<std::error_code> sent = say_done();
  sent.start();
  poller.run_until([&] { return sent.done(); });
  return ok && !sent.result() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("The classic RDMA client/server workflow, with rdmakit");
  app.require_subcommand(1);
  CLI::App* server = app.add_subcommand("server", "offer a buffer to one client");
  CLI::App* client = app.add_subcommand("client", "WRITE and READ the server's buffer");
  client->add_option("host", o.host, "the server's address")->required();
  for (CLI::App* mode : {server, client}) {
    mode->add_flag("--cm", o.cm, "connect through the RDMA CM");
    mode->add_option("--port", o.port, "TCP or RDMA CM port")->capture_default_str();
  }
  server->add_option("--bind", o.bind, "address to listen on")->capture_default_str();
  client->add_option("--size", o.size, "largest transfer")->check(CLI::Range(1ul, kServerBuffer));
  client->add_option("--iterations", o.iterations, "operations per loop")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    return server->parsed() ? run_server(o) : run_client(o);
  } catch (const std::exception& e) {  // rdmakit::Error says which step failed and why
    std::fprintf(stderr, "rdmakit_client_server: %s\n", e.what());
    return 1;
  }
}

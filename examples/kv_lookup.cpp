// A one-sided key-value lookup. The server builds an open-addressing hash table in registered
// memory, grants the client read-only access to it for a minute, and then serves no request
// at all: the client finds each key itself, reading the key's home slot with RDMA READ and
// the following slots on a collision, many lookups in flight from coroutines.
//
// Usage: kv_lookup server [--port N] [--keys N]
//        kv_lookup client HOST [--port N] [--lookups N]
#include <CLI/CLI.hpp>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>

#include "rdmakit/allocator.hpp"
#include "rdmakit/async_queue_pair.hpp"
#include "rdmakit/grant.hpp"
#include "rdmakit/poller.hpp"
#include "rdmakit/tcp_connection.hpp"

using namespace rdmakit;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kSlots = 4096;  // a power of two
constexpr auto kGrantTime = 60s;
constexpr int kInFlight = 16;  // lookups at once

// One slot, fetched whole by one 64-byte READ.
struct Entry {
  uint64_t key;
  // 0: an empty slot, where probing stops. A server updating entries in place would use it as
  // a seqlock (odd while writing) and readers would read again on an odd or changed version.
  uint64_t version;
  std::array<char, 48> value;
};
static_assert(sizeof(Entry) == 64);

// Both sides derive the keys and values, so the client can check every answer.
uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
  x = (x ^ (x >> 27)) * 0x94d049bb133111eb;
  return x ^ (x >> 31);
}
uint64_t key_of(uint64_t n) {
  return mix(n + 1);
}
uint64_t home_slot(uint64_t key) {
  return mix(key) % kSlots;
}
std::array<char, 48> value_of(uint64_t key) {
  std::array<char, 48> value{};
  std::snprintf(value.data(), value.size(), "value of %016llx",
                static_cast<unsigned long long>(key));
  return value;
}

// The handshake's user data: the table's grant and how many keys the table holds.
constexpr size_t kInfoSize = RemoteBuffer::kWireSize + sizeof(uint64_t);

int run_server(uint16_t port, uint64_t keys) {
  ResourceOptions sleeping;
  sleeping.completion_channel = true;  // the server sleeps while the client reads
  auto res = Resources::open(sleeping);
  MemoryAllocator allocator(res->pd);
  Allocation memory = allocator.allocate(kSlots * sizeof(Entry));  // zeroed: all slots empty
  std::span<Entry> table = memory.buffer().as<Entry>();
  for (uint64_t n = 0; n < keys; ++n) {
    const uint64_t key = key_of(n);
    uint64_t slot = home_slot(key);
    while (table[slot].version != 0) slot = (slot + 1) % kSlots;  // linear probing
    table[slot] = {key, 2, value_of(key)};
  }

  // A grant registers the table once more, read-only and for this client alone: its rkey
  // stops working when the grant is revoked or runs out, whatever the client does.
  GrantTable grants(res->pd, Access::remote_read);
  const Grant grant = grants.grant(memory.buffer(), Access::remote_read, kGrantTime);
  ConnectionOptions options;
  options.user_data.resize(kInfoSize);
  grant.remote.encode(std::span(options.user_data).first<RemoteBuffer::kWireSize>());
  std::memcpy(options.user_data.data() + RemoteBuffer::kWireSize, &keys, sizeof keys);

  TcpAcceptor acceptor(res, "0.0.0.0", port, options);
  std::printf("server: %llu keys in %llu slots, listening on port %u\n",
              static_cast<unsigned long long>(keys), static_cast<unsigned long long>(kSlots),
              acceptor.port());
  std::fflush(stdout);
  Connection connection = acceptor.accept();
  std::printf("server: client connected: %s\n", connection.summary().c_str());
  std::printf("server: granted the table read-only for %lld s (rkey 0x%x)\n",
              static_cast<long long>(kGrantTime.count()), grant.remote.rkey());
  std::fflush(stdout);

  // Nothing to serve: wait for the client's goodbye, at most until the grant runs out.
  Poller poller(res->cq, res->channel.get());
  AsyncQueuePair qp(poller, connection.qp());
  Allocation note = allocator.allocate(64, Purpose::recv);
  const auto expiry =
      GrantTable::Clock::time_point(std::chrono::milliseconds(grant.remote.expires_at_ms()));
  const auto left =
      std::chrono::duration_cast<std::chrono::nanoseconds>(expiry - GrantTable::Clock::now());
  auto wait_for_goodbye = [&]() -> Task<Received> {
    co_return co_await qp.recv(note.buffer(), {.timeout = left, .stop = nullptr});
  };
  Task<Received> goodbye = wait_for_goodbye();
  goodbye.start();
  while (!goodbye.done()) poller.wait(1s);
  const Received got = goodbye.result();
  grants.revoke(grant.id);
  if (got.error) {
    std::printf("server: no goodbye from the client (%s); grant revoked\n",
                got.error.message().c_str());
    return 1;
  }
  std::printf("server: client said goodbye; grant revoked\n");
  return 0;
}

// What one lookup found: the entry (in the reader's scratch slot) or nothing.
struct Found {
  std::error_code error;
  const Entry* entry = nullptr;
  int reads = 0;
};

// Looks `key` up the way the server placed it: its home slot, then the next ones until the key
// or an empty slot turns up. One READ per slot into `scratch`.
Task<Found> find(AsyncQueuePair& qp, RemoteBuffer table, LocalBuffer scratch, uint64_t key) {
  Found found;
  for (uint64_t slot = home_slot(key); found.reads < static_cast<int>(kSlots);
       slot = (slot + 1) % kSlots) {
    ++found.reads;
    found.error = co_await qp.read(scratch, table.subspan(slot * sizeof(Entry), sizeof(Entry)));
    const Entry& entry = scratch.as<Entry>()[0];
    if (found.error || entry.version == 0) break;
    if (entry.key == key) {
      found.entry = &entry;
      break;
    }
  }
  co_return found;
}

int run_client(const std::string& host, uint16_t port, uint64_t lookups) {
  auto res = Resources::open();
  Connection connection = TcpConnector(res).connect(host, port);
  std::printf("client: connected: %s\n", connection.summary().c_str());
  if (connection.peer_data().size() != kInfoSize) throw std::runtime_error("no table offered");
  const auto info = std::span(connection.peer_data());
  const RemoteBuffer table = RemoteBuffer::decode(info.first<RemoteBuffer::kWireSize>());
  uint64_t keys;
  std::memcpy(&keys, info.data() + RemoteBuffer::kWireSize, sizeof keys);
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      GrantTable::Clock::now().time_since_epoch());
  std::printf(
      "client: table of %llu keys, %llu bytes, readable for %.1f s more\n",
      static_cast<unsigned long long>(keys), static_cast<unsigned long long>(table.size()),
      (static_cast<double>(table.expires_at_ms()) - static_cast<double>(now_ms.count())) / 1e3);
  if (table.size() != kSlots * sizeof(Entry)) throw std::runtime_error("unexpected table size");

  MemoryAllocator allocator(res->pd);
  Allocation scratch = allocator.allocate(kInFlight * sizeof(Entry), Purpose::recv);
  Poller poller(res->cq);
  AsyncQueuePair qp(poller, connection.qp());

  // kInFlight readers take the next lookup as they finish one. One lookup in 8 asks for a key
  // the table does not hold: the right answer is then "not found".
  uint64_t next = 0, wrong = 0, reads = 0;
  std::error_code error;
  std::chrono::steady_clock::duration waited{};
  int running = kInFlight;
  auto reader = [&](LocalBuffer slot) -> Task<void> {
    while (next < lookups && !error) {
      const uint64_t i = next++;
      const bool present = i % 8 != 7;
      const uint64_t key = key_of(present ? i % keys : keys + i);
      const auto start = std::chrono::steady_clock::now();
      const Found found = co_await find(qp, table, slot, key);
      waited += std::chrono::steady_clock::now() - start;
      reads += static_cast<uint64_t>(found.reads);
      if (found.error)
        error = found.error;
      else if (present ? !found.entry || found.entry->value != value_of(key)
                       : found.entry != nullptr)
        ++wrong;
    }
    --running;
  };
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < kInFlight; ++i)
    spawn(reader(scratch.buffer().subspan(i * sizeof(Entry), sizeof(Entry))));
  poller.run_until([&] { return running == 0; });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (error) {
    const bool expired = GrantTable::Clock::now().time_since_epoch() >=
                         std::chrono::milliseconds(table.expires_at_ms());
    std::fprintf(stderr, "client: RDMA READ failed: %s%s\n", error.message().c_str(),
                 expired ? " (the grant has expired)" : "");
    return 1;
  }
  std::printf(
      "client: %llu lookups in %.3f s: %.0f lookups/s, average latency %.2f us, %.2f reads each\n",
      static_cast<unsigned long long>(lookups), seconds, static_cast<double>(lookups) / seconds,
      std::chrono::duration<double, std::micro>(waited).count() / static_cast<double>(lookups),
      static_cast<double>(reads) / static_cast<double>(lookups));
  if (wrong == 0)
    std::printf("client: every lookup found the right value\n");
  else
    std::printf("client: %llu lookups went WRONG\n", static_cast<unsigned long long>(wrong));

  // The only message of the run: goodbye, so the server can revoke the grant at once.
  auto say_goodbye = [&]() -> Task<std::error_code> {
    co_return co_await qp.send(scratch.buffer().first(0));
  };
  Task<std::error_code> sent = say_goodbye();
  sent.start();
  poller.run_until([&] { return sent.done(); });
  return wrong == 0 && !sent.result() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string host;
  uint16_t port = 7472;
  uint64_t keys = 3000, lookups = 100000;
  CLI::App app("One-sided key-value lookups with RDMA READ");
  app.require_subcommand(1);
  CLI::App* server = app.add_subcommand("server", "build the table and grant it to one client");
  CLI::App* client = app.add_subcommand("client", "look keys up in the server's table");
  for (CLI::App* mode : {server, client})
    mode->add_option("--port", port, "TCP port")->capture_default_str();
  server->add_option("--keys", keys, "keys in the table")
      ->check(CLI::Range(uint64_t{1}, kSlots * 3 / 4))
      ->capture_default_str();
  client->add_option("host", host, "the server's address")->required();
  client->add_option("--lookups", lookups, "lookups to make")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return server->parsed() ? run_server(port, keys) : run_client(host, port, lookups);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kv_lookup: %s\n", e.what());
    return 1;
  }
}

// The benchmark's own protocol: the hellos the connection handshake carries (user data), and
// the control messages each QP carries between sizes, as SEND_WITH_IMM whose immediate names
// them (data SENDs carry no immediate).
//
//   server                               client
//     accept  <-- ClientHello / ServerHello -->  connect     (one per QP)
//     GO(size)  -------------------------------->            per size, on every QP
//               <--------------------------------  DONE(size, figures)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "perf_options.hpp"
#include "perf_stats.hpp"
#include "rdmakit/buffer.hpp"

namespace rdmakit::tool {

enum class MessageKind : uint32_t { go = 0x52'4b'47'4f, done = 0x52'4b'44'4e };
// Largest control message (a DONE is 96 bytes).
inline constexpr size_t kControlBytes = 128;

struct Message {
  MessageKind kind{};
  std::array<std::byte, kControlBytes> bytes{};
  size_t length = 0;
};
// A received SEND_WITH_IMM as a message; nullopt if it is not one of ours.
std::optional<Message> to_message(uint32_t imm, std::span<const std::byte> payload);

// Both write into `out` (kControlBytes) and return the length used.
size_t encode_go(uint64_t size, std::span<std::byte, kControlBytes> out);
size_t encode_done(const SizeResult& result, std::span<std::byte, kControlBytes> out);
// Throw PerfError when the message is another one or malformed.
uint64_t decode_go(const Message& message);
SizeResult decode_done(const Message& message);

// What the server tells every client QP: the settings it runs with (the client refuses
// others) and its data slots, `stride` bytes apart, QP i using slot i.
struct ServerHello {
  TestKind test{};
  uint32_t qps = 0;
  uint32_t iters = 0;
  uint64_t min_size = 0, max_size = 0;
  uint64_t stride = 0;
  RemoteBuffer slots;
};
std::vector<std::byte> encode(const ServerHello& hello);
std::optional<ServerHello> decode_server_hello(std::span<const std::byte> bytes);

// What a client QP tells the server: its index, how many QPs the client runs and its slot.
// 32 bytes, the most RDMA CM carries on connect.
struct ClientHello {
  RemoteBuffer slot;
  uint16_t index = 0;
  uint16_t qps = 0;
};
std::vector<std::byte> encode(const ClientHello& hello);
std::optional<ClientHello> decode_client_hello(std::span<const std::byte> bytes);

}  // namespace rdmakit::tool

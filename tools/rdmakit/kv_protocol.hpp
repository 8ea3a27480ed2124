// The wire format of `rdmakit kv`: one RPC method per operation, little-endian fields.
//   GET       key u64                      -> the value (ok) or Code::not_found
//   PUT       key u64, length u32, value   -> empty (ok); Code::resource_exhausted when full
//   DELETE    key u64                      -> one byte: 1 if the key was there, 0 if not
//   DESCRIBE  grant_seconds u32, writers u32 -> TableInfo (the table's shape, the first of
//             `writers` writer ids reserved for the caller, and with grant_seconds > 0 a
//             read-only grant of the table and the port where RDMA connections are accepted)
// Anything else (short or long frame, unknown method, value too large, key out of range) is
// answered with an error status, never served.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "rdmakit/buffer.hpp"
#include "rdmakit/rpc/status.hpp"

namespace rdmakit::tool::kv {

enum Method : uint32_t { kGet = 1, kPut = 2, kDelete = 3, kDescribe = 4 };

inline constexpr size_t kKeyBytes = 8;
inline constexpr size_t kPutHeaderBytes = 12;  // key, length
inline constexpr size_t kDescribeBytes = 8;    // grant_seconds, writers

enum class Op : uint8_t { get, put, erase, describe };

struct Request {
  Op op = Op::get;
  uint64_t key = 0;
  std::span<const std::byte> value;  // PUT: points into the request
  uint32_t grant_seconds = 0;        // DESCRIBE
  uint32_t writers = 0;              // DESCRIBE
};

// What the server accepts.
struct Limits {
  uint64_t keys = 0;       // keys are 0 .. keys-1
  uint32_t max_value = 0;  // bytes
};

// A decoded request, or the status to answer a malformed one with.
struct Decoded {
  rpc::Code code = rpc::Code::ok;
  std::string_view error;  // a static string
  Request request;
  bool ok() const noexcept { return code == rpc::Code::ok; }
};

Decoded decode_request(uint32_t method, std::span<const std::byte> data,
                       const Limits& limits) noexcept;

// Encoders of the client side.
std::array<std::byte, kKeyBytes> encode_key(uint64_t key) noexcept;  // GET, DELETE
void encode_put(std::span<std::byte> out, uint64_t key, std::span<const std::byte> value) noexcept;
// The header alone; the value goes to out[kPutHeaderBytes ..].
void encode_put_header(std::span<std::byte> out, uint64_t key, uint32_t length) noexcept;
inline size_t put_bytes(size_t value) noexcept {
  return kPutHeaderBytes + value;
}
std::array<std::byte, kDescribeBytes> encode_describe(uint32_t grant_seconds,
                                                      uint32_t writers) noexcept;

// The DESCRIBE reply.
struct TableInfo {
  uint64_t keys = 0;
  uint32_t value_capacity = 0;
  uint32_t slot_bytes = 0;
  uint64_t slots = 0;
  uint32_t first_writer = 0;  // writer ids first_writer .. first_writer + writers - 1
  uint16_t rdma_port = 0;     // 0: no grant was asked for
  RemoteBuffer table;         // the grant (empty unless asked for)
};
inline constexpr size_t kTableInfoBytes = 8 + 4 + 4 + 8 + 4 + 2 + RemoteBuffer::kWireSize;

std::array<std::byte, kTableInfoBytes> encode_table_info(const TableInfo& info) noexcept;
std::optional<TableInfo> decode_table_info(std::span<const std::byte> data) noexcept;

// Little-endian fields.
void store_le(std::byte* out, uint64_t value, size_t bytes) noexcept;
uint64_t load_le(const std::byte* in, size_t bytes) noexcept;

}  // namespace rdmakit::tool::kv

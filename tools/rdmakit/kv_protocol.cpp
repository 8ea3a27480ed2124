#include "kv_protocol.hpp"

#include <algorithm>

namespace rdmakit::tool::kv {

void store_le(std::byte* out, uint64_t value, size_t bytes) noexcept {
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<std::byte>(value >> (8 * i));
}

uint64_t load_le(const std::byte* in, size_t bytes) noexcept {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}

namespace {

Decoded refuse(rpc::Code code, std::string_view why) noexcept {
  Decoded d;
  d.code = code;
  d.error = why;
  return d;
}

// The key of a GET, PUT or DELETE, checked against the table's key range.
Decoded with_key(Op op, std::span<const std::byte> data, const Limits& limits) noexcept {
  Decoded d;
  d.request.op = op;
  d.request.key = load_le(data.data(), kKeyBytes);
  if (d.request.key >= limits.keys) return refuse(rpc::Code::out_of_range, "key out of range");
  return d;
}

}  // namespace

Decoded decode_request(uint32_t method, std::span<const std::byte> data,
                       const Limits& limits) noexcept {
  switch (method) {
    case kGet:
    case kDelete:
      if (data.size() != kKeyBytes)
        return refuse(rpc::Code::invalid_argument, "GET and DELETE take an 8-byte key");
      return with_key(method == kGet ? Op::get : Op::erase, data, limits);
    case kPut: {
      if (data.size() < kPutHeaderBytes)
        return refuse(rpc::Code::invalid_argument, "PUT shorter than its header");
      const uint64_t length = load_le(data.data() + kKeyBytes, 4);
      if (length != data.size() - kPutHeaderBytes)
        return refuse(rpc::Code::invalid_argument, "PUT length does not match the frame");
      if (length == 0 || length > limits.max_value)
        return refuse(rpc::Code::invalid_argument, "PUT value size outside 1 .. the table's");
      Decoded d = with_key(Op::put, data, limits);
      if (d.ok()) d.request.value = data.subspan(kPutHeaderBytes);
      return d;
    }
    case kDescribe: {
      if (data.size() != kDescribeBytes)
        return refuse(rpc::Code::invalid_argument, "DESCRIBE takes 8 bytes");
      Decoded d;
      d.request.op = Op::describe;
      d.request.grant_seconds = static_cast<uint32_t>(load_le(data.data(), 4));
      d.request.writers = static_cast<uint32_t>(load_le(data.data() + 4, 4));
      if (d.request.writers > (1u << 16))
        return refuse(rpc::Code::invalid_argument, "DESCRIBE asks for too many writers");
      return d;
    }
    default:
      return refuse(rpc::Code::invalid_argument, "unknown operation");
  }
}

std::array<std::byte, kKeyBytes> encode_key(uint64_t key) noexcept {
  std::array<std::byte, kKeyBytes> out;
  store_le(out.data(), key, kKeyBytes);
  return out;
}

void encode_put_header(std::span<std::byte> out, uint64_t key, uint32_t length) noexcept {
  store_le(out.data(), key, kKeyBytes);
  store_le(out.data() + kKeyBytes, length, 4);
}

void encode_put(std::span<std::byte> out, uint64_t key, std::span<const std::byte> value) noexcept {
  encode_put_header(out, key, static_cast<uint32_t>(value.size()));
  std::copy(value.begin(), value.end(), out.begin() + kPutHeaderBytes);
}

std::array<std::byte, kDescribeBytes> encode_describe(uint32_t grant_seconds,
                                                      uint32_t writers) noexcept {
  std::array<std::byte, kDescribeBytes> out;
  store_le(out.data(), grant_seconds, 4);
  store_le(out.data() + 4, writers, 4);
  return out;
}

std::array<std::byte, kTableInfoBytes> encode_table_info(const TableInfo& info) noexcept {
  std::array<std::byte, kTableInfoBytes> out{};
  std::byte* p = out.data();
  store_le(p, info.keys, 8);
  store_le(p + 8, info.value_capacity, 4);
  store_le(p + 12, info.slot_bytes, 4);
  store_le(p + 16, info.slots, 8);
  store_le(p + 24, info.first_writer, 4);
  store_le(p + 28, info.rdma_port, 2);
  info.table.encode(std::span(out).subspan<30, RemoteBuffer::kWireSize>());
  return out;
}

std::optional<TableInfo> decode_table_info(std::span<const std::byte> data) noexcept {
  if (data.size() != kTableInfoBytes) return std::nullopt;
  const std::byte* p = data.data();
  TableInfo info;
  info.keys = load_le(p, 8);
  info.value_capacity = static_cast<uint32_t>(load_le(p + 8, 4));
  info.slot_bytes = static_cast<uint32_t>(load_le(p + 12, 4));
  info.slots = load_le(p + 16, 8);
  info.first_writer = static_cast<uint32_t>(load_le(p + 24, 4));
  info.rdma_port = static_cast<uint16_t>(load_le(p + 28, 2));
  info.table = RemoteBuffer::decode(data.subspan<30, RemoteBuffer::kWireSize>());
  return info;
}

}  // namespace rdmakit::tool::kv

#include "rdmakit/buffer.hpp"

#include <endian.h>

#include <cstdio>

namespace rdmakit {
namespace detail {

void out_of_bounds(const char* kind, uint64_t offset, uint64_t count, uint64_t size) noexcept {
  char message[160];
  std::snprintf(message, sizeof message,
                "%s slice [%llu, +%llu) is outside the buffer of %llu bytes", kind,
                static_cast<unsigned long long>(offset), static_cast<unsigned long long>(count),
                static_cast<unsigned long long>(size));
  programming_error(message);
}

}  // namespace detail

namespace {

template <typename T>
void put(std::byte*& out, T value) {
  std::memcpy(out, &value, sizeof value);
  out += sizeof value;
}

template <typename T>
T take(const std::byte*& in) {
  T value;
  std::memcpy(&value, in, sizeof value);
  in += sizeof value;
  return value;
}

}  // namespace

void RemoteBuffer::encode(std::span<std::byte, kWireSize> out) const noexcept {
  std::byte* p = out.data();
  put(p, htole64(address_));
  put(p, htole64(size_));
  put(p, htole32(rkey_));
  put(p, htole64(expires_at_ms_));
}

RemoteBuffer RemoteBuffer::decode(std::span<const std::byte, kWireSize> in) noexcept {
  const std::byte* p = in.data();
  const uint64_t address = le64toh(take<uint64_t>(p));
  const uint64_t size = le64toh(take<uint64_t>(p));
  const uint32_t rkey = le32toh(take<uint32_t>(p));
  const uint64_t expires = le64toh(take<uint64_t>(p));
  return {address, size, rkey, expires};
}

static_assert(RemoteBuffer::kWireSize == 8 + 8 + 4 + 8, "wire form: address, size, rkey, expiry");

}  // namespace rdmakit

#include "perf_messages.hpp"

#include <endian.h>

#include <bit>
#include <cstring>

#include "bounded.hpp"
#include "rdmakit/handshake.hpp"

namespace rdmakit::tool {
namespace {

constexpr uint32_t kServerHelloMagic = 0x6670'6b72;  // "rkpf"
constexpr size_t kServerHelloBytes = 36 + RemoteBuffer::kWireSize;
constexpr size_t kClientHelloBytes = RemoteBuffer::kWireSize + 4;
static_assert(kClientHelloBytes <= kCmConnectUserData);
static_assert(kServerHelloBytes <= kCmAcceptUserData);
constexpr size_t kGoBytes = 8;
constexpr size_t kDoneBytes = 16 + 10 * 8;
static_assert(kDoneBytes <= kControlBytes);

// Little-endian fields, in order.
class Writer {
 public:
  explicit Writer(std::span<std::byte> out) : out_(out) {}
  Writer& u16(uint16_t v) { return put(htole16(v)); }
  Writer& u32(uint32_t v) { return put(htole32(v)); }
  Writer& u64(uint64_t v) { return put(htole64(v)); }
  Writer& f64(double v) { return u64(std::bit_cast<uint64_t>(v)); }
  size_t used() const { return used_; }

 private:
  template <typename T>
  Writer& put(T v) {
    std::memcpy(out_.data() + used_, &v, sizeof v);
    used_ += sizeof v;
    return *this;
  }
  std::span<std::byte> out_;
  size_t used_ = 0;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  uint16_t u16() { return le16toh(get<uint16_t>()); }
  uint32_t u32() { return le32toh(get<uint32_t>()); }
  uint64_t u64() { return le64toh(get<uint64_t>()); }
  double f64() { return std::bit_cast<double>(u64()); }
  size_t used() const { return used_; }

 private:
  template <typename T>
  T get() {
    T v;
    std::memcpy(&v, in_.data() + used_, sizeof v);
    used_ += sizeof v;
    return v;
  }
  std::span<const std::byte> in_;
  size_t used_ = 0;
};

const Message& expect(const Message& m, MessageKind kind, size_t length, const char* name) {
  if (m.kind != kind || m.length != length)
    throw PerfError(std::string("protocol error: expected a ") + name + " message from the peer");
  return m;
}

}  // namespace

std::optional<Message> to_message(uint32_t imm, std::span<const std::byte> payload) {
  const auto kind = static_cast<MessageKind>(imm);
  if ((kind != MessageKind::go && kind != MessageKind::done) || payload.size() > kControlBytes)
    return std::nullopt;
  Message m;
  m.kind = kind;
  m.length = payload.size();
  std::memcpy(m.bytes.data(), payload.data(), payload.size());
  return m;
}

size_t encode_go(uint64_t size, std::span<std::byte, kControlBytes> out) {
  return Writer(out).u64(size).used();
}

uint64_t decode_go(const Message& message) {
  return Reader(expect(message, MessageKind::go, kGoBytes, "GO").bytes).u64();
}

size_t encode_done(const SizeResult& r, std::span<std::byte, kControlBytes> out) {
  Writer w(out);
  w.u64(r.size).u64(r.iterations);
  w.f64(r.bw.peak_mib).f64(r.bw.avg_mib).f64(r.bw.msg_rate_mpps);
  w.f64(r.lat.min).f64(r.lat.max).f64(r.lat.typical).f64(r.lat.avg).f64(r.lat.stdev);
  w.f64(r.lat.p99).f64(r.lat.p999);
  return w.used();
}

SizeResult decode_done(const Message& message) {
  Reader in(expect(message, MessageKind::done, kDoneBytes, "DONE").bytes);
  SizeResult r;
  r.size = in.u64();
  r.iterations = in.u64();
  r.bw = {in.f64(), in.f64(), in.f64()};
  r.lat = {in.f64(), in.f64(), in.f64(), in.f64(), in.f64(), in.f64(), in.f64()};
  return r;
}

std::vector<std::byte> encode(const ServerHello& h) {
  std::vector<std::byte> out(kServerHelloBytes);
  Writer w(out);
  w.u32(kServerHelloMagic).u32(static_cast<uint32_t>(h.test)).u32(h.qps).u32(h.iters);
  w.u64(h.min_size).u64(h.max_size).u32(static_cast<uint32_t>(h.stride));
  h.slots.encode(std::span(out).subspan<36, RemoteBuffer::kWireSize>());
  return out;
}

std::optional<ServerHello> decode_server_hello(std::span<const std::byte> bytes) {
  if (bytes.size() != kServerHelloBytes) return std::nullopt;
  Reader in(bytes);
  if (in.u32() != kServerHelloMagic) return std::nullopt;
  ServerHello h;
  const uint32_t test = in.u32();
  if (test > static_cast<uint32_t>(TestKind::atomic_lat)) return std::nullopt;
  h.test = static_cast<TestKind>(test);
  h.qps = in.u32();
  h.iters = in.u32();
  h.min_size = in.u64();
  h.max_size = in.u64();
  h.stride = in.u32();
  h.slots = RemoteBuffer::decode(bytes.subspan<36, RemoteBuffer::kWireSize>());
  return h;
}

std::vector<std::byte> encode(const ClientHello& h) {
  std::vector<std::byte> out(kClientHelloBytes);
  h.slot.encode(std::span(out).first<RemoteBuffer::kWireSize>());
  Writer(std::span(out).subspan(RemoteBuffer::kWireSize)).u16(h.index).u16(h.qps);
  return out;
}

std::optional<ClientHello> decode_client_hello(std::span<const std::byte> bytes) {
  if (bytes.size() != kClientHelloBytes) return std::nullopt;
  ClientHello h;
  h.slot = RemoteBuffer::decode(bytes.first<RemoteBuffer::kWireSize>());
  Reader in(bytes.subspan(RemoteBuffer::kWireSize));
  h.index = in.u16();
  h.qps = in.u16();
  return h;
}

}  // namespace rdmakit::tool

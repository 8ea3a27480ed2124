#include "tcp_frames.hpp"

#include <endian.h>

#include <cstring>

#include "rdmakit/error.hpp"

namespace rdmakit::detail {

void append_frame(std::vector<std::byte>& out, Frame kind, std::span<const std::byte> payload) {
  const uint32_t len = htole32(static_cast<uint32_t>(payload.size()));
  const size_t at = out.size();
  out.resize(at + kFrameHeaderBytes + payload.size());
  out[at] = static_cast<std::byte>(kind);
  std::memcpy(out.data() + at + 1, &len, sizeof len);
  if (!payload.empty())
    std::memcpy(out.data() + at + kFrameHeaderBytes, payload.data(), payload.size());
}

std::error_code parse_frame_header(std::span<const std::byte, kFrameHeaderBytes> header,
                                   Frame& kind, uint32_t& length) {
  std::memcpy(&length, header.data() + 1, sizeof length);
  length = le32toh(length);
  kind = static_cast<Frame>(header[0]);
  if (length > kMaxFrame || (kind != Frame::offer && kind != Frame::reject && kind != Frame::ready))
    return make_error_code(Errc::handshake_malformed);
  return {};
}

bool send_frame(int fd, Frame kind, std::span<const std::byte> payload, Deadline deadline,
                std::error_code& ec) {
  std::vector<std::byte> bytes;
  append_frame(bytes, kind, payload);
  return send_all(fd, bytes.data(), bytes.size(), deadline, ec);
}

bool recv_frame(int fd, Frame& kind, std::vector<std::byte>& payload, Deadline deadline,
                std::error_code& ec) {
  std::byte header[kFrameHeaderBytes];
  if (!recv_exact(fd, header, sizeof header, deadline, ec)) return false;
  uint32_t len = 0;
  ec = parse_frame_header(header, kind, len);
  if (ec) return false;
  payload.resize(len);
  return recv_exact(fd, payload.data(), len, deadline, ec);
}

std::vector<std::byte> reject_payload(std::error_code ec, const std::string& why) {
  std::vector<std::byte> out(1 + why.size());
  out[0] = static_cast<std::byte>(ec.category() == rdmakit_category() ? ec.value()
                                                                      : int(Errc::rejected));
  std::memcpy(out.data() + 1, why.data(), why.size());
  return out;
}

std::error_code read_reject(std::span<const std::byte> payload, std::string& why) {
  if (payload.empty()) return make_error_code(Errc::rejected);
  why = "the peer refused: " +
        std::string(reinterpret_cast<const char*>(payload.data()) + 1, payload.size() - 1);
  const int code = static_cast<int>(payload[0]);
  return code >= int(Errc::handshake_malformed) && code <= int(Errc::handshake_mismatch)
             ? make_error_code(static_cast<Errc>(code))
             : make_error_code(Errc::rejected);
}

std::error_code read_offer(Frame kind, std::span<const std::byte> payload, HandshakeOffer& theirs,
                           std::string& why) {
  if (kind == Frame::reject) return read_reject(payload, why);
  const std::error_code ec = kind == Frame::offer ? decode(payload, OfferForm::full, theirs)
                                                  : make_error_code(Errc::handshake_malformed);
  if (ec == Errc::handshake_version) {
    HandshakeOffer ours;
    check_compatible(ours, theirs, why);
  } else if (ec) {
    why = "the peer's offer is not an rdmakit handshake";
  }
  return ec;
}

}  // namespace rdmakit::detail

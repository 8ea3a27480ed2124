// The frames of the TCP handshake (tcp_connection.hpp): kind (1 byte), length (4 bytes,
// little-endian), payload. An offer carries an encoded HandshakeOffer, a refusal the error
// and why, "ready" nothing: each side sends it once its QP is connected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "deadline_socket.hpp"
#include "rdmakit/handshake.hpp"

namespace rdmakit::detail {

enum class Frame : uint8_t { offer = 'O', reject = 'R', ready = 'K' };
constexpr size_t kFrameHeaderBytes = 5;
constexpr uint32_t kMaxFrame = 64 * 1024 + 256;  // an offer with the largest user data
static_assert(kMaxFrame >= 0xffff + 58, "a frame holds an offer with 64 KiB of user data");

/// The frame's bytes, header first, appended to `out`.
void append_frame(std::vector<std::byte>& out, Frame kind, std::span<const std::byte> payload);
/// The payload length a frame header announces; Errc::handshake_malformed for an unknown
/// kind or a length beyond kMaxFrame.
std::error_code parse_frame_header(std::span<const std::byte, kFrameHeaderBytes> header,
                                   Frame& kind, uint32_t& length);

bool send_frame(int fd, Frame kind, std::span<const std::byte> payload, Deadline deadline,
                std::error_code& ec);
bool recv_frame(int fd, Frame& kind, std::vector<std::byte>& payload, Deadline deadline,
                std::error_code& ec);

/// A reject frame's payload: the error (1 byte, an Errc) and the explanation.
std::vector<std::byte> reject_payload(std::error_code ec, const std::string& why);
/// The error a reject frame carries; `why` says what the peer refused.
std::error_code read_reject(std::span<const std::byte> payload, std::string& why);
/// The peer's offer from a frame it sent (a refusal or something else: the error, and why).
std::error_code read_offer(Frame kind, std::span<const std::byte> payload, HandshakeOffer& theirs,
                           std::string& why);

}  // namespace rdmakit::detail

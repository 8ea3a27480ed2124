// The accepting side of one TCP handshake (tcp_connection.hpp), moved along by whatever has
// arrived, never waiting: read the client's offer, answer with ours (or a refusal), connect
// the QP, send "ready", read the client's "ready". TcpAcceptor::accept_for drives one
// while it waits on its socket; accept_ready() drives many from an event loop.
#pragma once

#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "deadline_socket.hpp"
#include "rdmakit/connection.hpp"
#include "tcp_frames.hpp"

namespace rdmakit::detail {

class ServerHandshake {
 public:
  enum class State {
    reading_offer,  // the client speaks first
    reading_ready,  // our offer and ready are sent (or going), the client's ready is awaited
    finishing,      // the client's ready is in; ours is still leaving
    done,
    failed
  };

  /// Takes the accepted, non-blocking socket `fd` (closed when this goes).
  ServerHandshake(int fd, Deadline deadline) : fd_(fd), deadline_(deadline) {}
  ~ServerHandshake();
  ServerHandshake(const ServerHandshake&) = delete;
  ServerHandshake& operator=(const ServerHandshake&) = delete;

  /// Moves as far as the socket allows now.
  void advance(const std::shared_ptr<Resources>& resources, const ConnectionOptions& options);
  State state() const noexcept { return state_; }
  /// Output the socket did not take yet: wait until it is writable, not readable.
  bool wants_write() const noexcept { return sent_ < out_.size(); }
  int fd() const noexcept { return fd_; }
  Deadline deadline() const noexcept { return deadline_; }
  /// Once done: the connection (once).
  Connection take(const std::shared_ptr<Resources>& resources);
  /// Once failed: why (ec is also set on a timeout by the caller).
  std::error_code error() const noexcept { return ec_; }
  const std::string& why() const noexcept { return why_; }
  void fail(std::error_code ec, std::string why);

 private:
  /// The next frame when it has fully arrived (false: not yet, or failed).
  bool read_frame(Frame& kind, std::vector<std::byte>& payload);
  /// Sends what waits in out_; false once the connection is broken.
  bool flush();
  void on_offer(Frame kind, std::span<const std::byte> payload,
                const std::shared_ptr<Resources>& resources, const ConnectionOptions& options);
  /// Queues a refusal, sends what the socket takes of it, and fails.
  void refuse(std::error_code ec, std::string why);

  int fd_;
  Deadline deadline_;
  State state_ = State::reading_offer;
  std::vector<std::byte> in_;  // the frame being read: header, then payload
  std::vector<std::byte> out_;
  size_t sent_ = 0;
  std::optional<QueuePair> qp_;
  HandshakeOffer theirs_;
  Negotiated negotiated_{};
  std::error_code ec_;
  std::string why_;
};

}  // namespace rdmakit::detail

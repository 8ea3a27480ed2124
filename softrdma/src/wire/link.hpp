// The requester side of the TCP transport: one connection per remote host, shared by all
// QPs of this process. Responses are read by a thread that sleeps in recv().
#pragma once

#include <sys/uio.h>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "wire/protocol.hpp"

namespace softrdma::wire {

class Link {
 public:
  /// The connection to the host with IPv4 address `ipv4_be`; made (or remade after a
  /// failure) on demand. nullptr when the host cannot be reached right now.
  static std::shared_ptr<Link> to(uint32_t ipv4_be);

  /// Sends a request and its payload. False once the connection is broken.
  bool send(const Request& header, const iovec* payload, int count);
  bool alive() const { return alive_.load(std::memory_order_acquire); }

  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

 private:
  explicit Link(int fd) : fd_(fd) {}
  static void read_loop(std::shared_ptr<Link> self);
  void shut();

  int fd_;
  std::mutex write_mutex_;
  std::atomic<bool> alive_{true};
};

/// Called by a link's reader for every well-formed response (defined by the requester).
void on_response(Link& link, const Response& response, std::vector<char>& payload);
/// Called when a link breaks: its requests in flight will not be answered.
void on_link_down(Link& link);

}  // namespace softrdma::wire

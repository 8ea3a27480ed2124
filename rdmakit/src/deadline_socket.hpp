// Blocking-style socket I/O bounded by a deadline (poll(2) on non-blocking sockets).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <system_error>

namespace rdmakit::detail {

using Deadline = std::chrono::steady_clock::time_point;

// A non-blocking TCP socket connected to host:port, or -1 with `ec` set (timed_out when the
// deadline passes first).
int tcp_connect(const std::string& host, uint16_t port, Deadline deadline, std::error_code& ec);
// A listening socket on address:port (0: ephemeral), or throws Error.
int tcp_listen(const std::string& address, uint16_t port, int backlog);
uint16_t local_port(int fd);
// "a.b.c.d:port" of the peer.
std::string peer_name(int fd);
// Waits until `fd` has one of `events` (poll(2)'s), or the deadline passes: timed_out.
bool wait_for(int fd, short events, Deadline deadline, std::error_code& ec);
// Waits until `fd` is readable (or the deadline passes: timed_out). A negative deadline
// count means no limit.
bool wait_readable(int fd, Deadline deadline, std::error_code& ec);
bool send_all(int fd, const void* data, size_t size, Deadline deadline, std::error_code& ec);
// Errc::peer_closed if the peer closes first.
bool recv_exact(int fd, void* data, size_t size, Deadline deadline, std::error_code& ec);

}  // namespace rdmakit::detail

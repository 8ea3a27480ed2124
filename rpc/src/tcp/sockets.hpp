// TCP socket helpers that tcp:// and ud:// (whose sessions are set up over TCP) share:
// HOST:PORT parsing, name resolution, connecting and listening with deadlines.
#pragma once

#include <netdb.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>

#include "core/coarse_clock.hpp"

namespace rdmakit::rpc::detail {

struct HostPort {
  std::string written_host;  // as in the URL: "[::1]"
  std::string host;          // for getaddrinfo: "::1"
  std::string port;
};
/// "HOST:PORT", an IPv6 HOST in brackets; nothing if malformed.
std::optional<HostPort> parse_host_port(const std::string& address);

struct FreeAddresses {
  void operator()(addrinfo* addresses) const noexcept { freeaddrinfo(addresses); }
};
using Addresses = std::unique_ptr<addrinfo, FreeAddresses>;
/// The stream addresses of `where` (passive: to listen on); null with `error` set.
Addresses resolve(const HostPort& where, bool passive, std::error_code& error);
/// The same for the HOST:PORT of a URL, parsed into `where` (Errc::bad_url if malformed).
Addresses resolve(const std::string& host_port, bool passive, HostPort& where,
                  std::error_code& error);

/// errno as an error, a refused connection as Errc::not_listening.
std::error_code system_error(int code);
/// Small frames go out at once, not after Nagle's delay.
void set_no_delay(int fd);
/// Waits for `events` on `fd`; false with `error` set once `deadline` passes.
bool wait_for(int fd, short events, Clock::time_point deadline, std::error_code& error);
/// A connected non-blocking socket to `address`, or -1 with `error` set.
int connect_socket(const addrinfo& address, Clock::time_point deadline, std::error_code& error);
/// A listening non-blocking socket on `address`, or -1 with `error` set.
int listen_socket(const addrinfo& address, std::error_code& error);
/// The first of `addresses` that listens, or -1 with `error` set.
int listen_on(const Addresses& addresses, std::error_code& error);
uint16_t bound_port(int fd);
/// Sends all of `bytes` on a non-blocking socket before `deadline`.
bool send_all(int fd, std::span<const std::byte> bytes, Clock::time_point deadline,
              std::error_code& error);
/// Receives exactly `space.size()` bytes before `deadline` (Errc::session_closed at EOF).
bool receive_all(int fd, std::span<std::byte> space, Clock::time_point deadline,
                 std::error_code& error);

}  // namespace rdmakit::rpc::detail

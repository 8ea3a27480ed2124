// A TCP peer that sends malformed or truncated frames (or no proper hello): that session is
// closed, nothing half-read reaches the application, and the server serves everyone else.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "core/frame.hpp"
#include "rpc_fixture.hpp"
#include "tcp/tcp_hello.hpp"

using namespace rdmakit::rpc;
using namespace rdmakit::rpc::testing;
namespace detail = rdmakit::rpc::detail;

namespace {

enum class Bad { garbage_hello, unknown_kind, oversized_length, unknown_flags, truncated_frame };

std::string bad_name(const ::testing::TestParamInfo<Bad>& info) {
  switch (info.param) {
    case Bad::garbage_hello:
      return "GarbageHello";
    case Bad::unknown_kind:
      return "UnknownKind";
    case Bad::oversized_length:
      return "OversizedLength";
    case Bad::unknown_flags:
      return "UnknownFlags";
    case Bad::truncated_frame:
      return "TruncatedFrame";
  }
  return "unknown";
}

int port_of(const std::string& url) {
  return std::stoi(url.substr(url.rfind(':') + 1));
}

int connect_raw(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

void send_all(int fd, const void* data, size_t size) {
  ASSERT_EQ(send(fd, data, size, MSG_NOSIGNAL), static_cast<ssize_t>(size));
}

class HostileTcpPeer : public ::testing::TestWithParam<Bad> {};

TEST_P(HostileTcpPeer, LosesItsSessionWhileTheServerServesOthers) {
  int opened = 0, closed = 0;
  Options options;
  options.max_message_bytes = 1 << 20;
  options.on_session = [&](SessionId, SessionEvent e) {
    (e == SessionEvent::opened ? opened : closed)++;
  };
  Server server = Server::listen("tcp://127.0.0.1:0", options);
  const int fd = connect_raw(port_of(server.url()));
  const detail::TcpHello hello{detail::kTcpHelloMagic, detail::kTcpHelloVersion, options.window,
                               options.max_message_bytes, 0};
  detail::FrameHeader frame{};
  frame.kind = detail::FrameKind::request;
  frame.max_response = 64;
  switch (GetParam()) {
    case Bad::garbage_hello: {
      const char junk[24] = "GET / HTTP/1.1\r\n\r\nxxxx";
      send_all(fd, junk, sizeof junk);
      break;
    }
    case Bad::unknown_kind:
      frame.kind = static_cast<detail::FrameKind>(99);
      send_all(fd, &hello, sizeof hello);
      send_all(fd, &frame, sizeof frame);
      break;
    case Bad::oversized_length:
      frame.length = options.max_message_bytes + 1;
      send_all(fd, &hello, sizeof hello);
      send_all(fd, &frame, sizeof frame);
      break;
    case Bad::unknown_flags:
      frame.flags = 0x80;
      send_all(fd, &hello, sizeof hello);
      send_all(fd, &frame, sizeof frame);
      break;
    case Bad::truncated_frame: {
      frame.length = 100;
      send_all(fd, &hello, sizeof hello);
      send_all(fd, &frame, sizeof frame);
      const char part[10] = {};
      send_all(fd, part, sizeof part);
      shutdown(fd, SHUT_WR);  // ...and the peer is gone mid-frame
      break;
    }
  }
  // The session is refused or closed; no request ever reaches the application.
  bool settled = false;
  const auto start = std::chrono::steady_clock::now();
  while (!settled && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    server.poll();
    EXPECT_FALSE(server.recv().has_value());
    settled = GetParam() == Bad::garbage_hello
                  ? std::chrono::steady_clock::now() - start > std::chrono::milliseconds(100)
                  : closed == 1;
  }
  EXPECT_TRUE(settled);
  EXPECT_EQ(opened, GetParam() == Bad::garbage_hello ? 0 : 1);
  EXPECT_EQ(server.session_count(), 0u);
  // The connection itself is closed by the server.
  char byte;
  timeval limit{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  ssize_t n;
  while ((n = recv(fd, &byte, 1, 0)) > 0) {
  }
  EXPECT_EQ(n, 0) << "expected the server to close the connection";
  close(fd);
  expect_new_client_served(server, options);  // everyone else is served
}

INSTANTIATE_TEST_SUITE_P(Frames, HostileTcpPeer,
                         ::testing::Values(Bad::garbage_hello, Bad::unknown_kind,
                                           Bad::oversized_length, Bad::unknown_flags,
                                           Bad::truncated_frame),
                         bad_name);

// Clients that connect and then say nothing, or only part of their hello, over the
// transports whose sessions are set up over a TCP connection: the server's poll never waits
// for them, and everyone else is served meanwhile.
class SilentTcpClients : public ::testing::TestWithParam<std::string> {};

TEST_P(SilentTcpClients, NeverHoldUpTheServersPoll) {
  Server server = Server::listen(fresh_url(GetParam()));
  const int silent = connect_raw(port_of(server.url()));
  const int partial = connect_raw(port_of(server.url()));
  send_all(partial, "\x01\x02\x03", 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // both in the backlog
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    server.poll();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500))
        << "poll " << i << " waited for a client's hello";
  }
  expect_new_client_served(server);
  EXPECT_EQ(server.session_count(), 1u) << "only the client that said hello has a session";
  close(silent);
  close(partial);
}

INSTANTIATE_TEST_SUITE_P(Transports, SilentTcpClients, ::testing::Values("tcp", "ud", "rc+tcp"),
                         [](const ::testing::TestParamInfo<std::string>& scheme) {
                           return scheme.param == "rc+tcp" ? std::string("rc_tcp") : scheme.param;
                         });

}  // namespace

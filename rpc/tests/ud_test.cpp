// What only ud:// has: an incast of clients whose multi-datagram requests and responses all
// arrive (each session's share of receive buffers is reserved), admission that refuses a
// session once the shares are all taken, while the admitted sessions carry on, and a client
// that goes away telling the server at once (no connection would tell it).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "rpc_fixture.hpp"

namespace rdmakit::rpc::testing {
namespace {

TEST(UdTransport, AnIncastOfThirtyTwoClientsGetsEveryResponse) {
  Server server = Server::listen("ud://127.0.0.1:0");
  constexpr int kClients = 32;
  constexpr int kDepth = 8;
  constexpr int kRounds = 4;
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<Endpoint*> endpoints;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<Client>(connect_to(server)));
    endpoints.push_back(clients.back().get());
  }
  // Requests and responses of three datagrams each, all clients at once, a window each.
  auto body = [](int client, int n) {
    return std::string(9000, static_cast<char>('a' + (client * 7 + n) % 26));
  };
  std::vector<int> issued(kClients, 0), answered(kClients, 0);
  int wrong = 0;
  CallOptions o;
  o.max_response = 9000;
  ASSERT_TRUE(poll_until(
      server, endpoints,
      [&] {
        for (int c = 0; c < kClients; ++c) {
          while (issued[c] < kDepth * kRounds && issued[c] - answered[c] < kDepth &&
                 clients[c]->call(bytes(body(c, issued[c])), static_cast<uint64_t>(c), o).ok())
            ++issued[c];
        }
        while (auto h = server.recv()) EXPECT_FALSE(std::move(*h).reply(h->data()));
        return std::accumulate(answered.begin(), answered.end(), 0) == kClients * kDepth * kRounds;
      },
      [&](const Response& r) {
        const int c = static_cast<int>(r.user_data);
        wrong += !r.status.ok() || text(r.data) != body(c, answered[c]);
        ++answered[c];
      }));
  EXPECT_EQ(wrong, 0);
  for (const auto& c : clients) EXPECT_TRUE(c->connected());
}

TEST(UdTransport, SessionsBeyondTheReservedReceiveBuffersAreRefused) {
  Server server = Server::listen("ud://127.0.0.1:0");
  Client client = connect_to(server);
  std::vector<SessionId> sessions{client.session()};
  std::error_code error;
  // Each endpoint reserves a share of its receive buffers per session: the client's endpoint
  // runs out first (the server's holds as many); the refusal is a result, not a failure.
  for (int i = 0; i < 1000 && !error; ++i) {
    std::error_code opening;
    std::atomic<bool> opened{false};
    std::thread serve([&] {
      while (!opened) server.poll();  // the handshake runs in the server's poll
    });
    const SessionId s = client.open_session(server.url(), opening);  // bounded: connect_timeout
    opened = true;
    serve.join();
    if (opening) {
      error = opening;
    } else {
      sessions.push_back(s);
    }
  }
  EXPECT_EQ(error, Errc::too_many_sessions);
  EXPECT_GE(sessions.size(), 64u);
  EXPECT_LT(sessions.size(), 1000u);
  // The admitted sessions still carry calls.
  int answered = 0;
  for (const SessionId s : {sessions.front(), sessions.back()})
    ASSERT_TRUE(client.call(s, bytes("still here"), 0).ok());
  ASSERT_TRUE(poll_until(
      server, {&client},
      [&] {
        while (auto h = server.recv()) EXPECT_FALSE(std::move(*h).reply(bytes("re:still here")));
        return answered == 2;
      },
      [&](const Response& r) { answered += r.status.ok() && text(r.data) == "re:still here"; }));
}

// Acknowledgements ride on replies and the next call; a client destroyed right after its
// last reply still acknowledges it, in the closing datagram: the server's session ends now,
// not after retransmitting the reply until Options::peer_timeout.
TEST(UdTransport, AClientDestroyedAfterItsReplyClosesTheServersSessionAtOnce) {
  std::vector<SessionEvent> events;
  Options server_options;
  server_options.peer_timeout = std::chrono::seconds(20);
  server_options.on_session = [&](SessionId, SessionEvent e) { events.push_back(e); };
  Server server = Server::listen("ud://127.0.0.1:0", server_options);
  {
    Options client_options;
    client_options.peer_timeout = server_options.peer_timeout;
    Client client = connect_to(server, client_options);
    ASSERT_TRUE(client.call(bytes("last words"), 0).ok());
    bool answered = false;
    ASSERT_TRUE(poll_until(
        server, {&client},
        [&] {
          while (auto h = server.recv()) EXPECT_FALSE(std::move(*h).reply(bytes("heard")));
          return answered;
        },
        [&](const Response& r) { answered = r.status.ok() && text(r.data) == "heard"; }));
  }
  const auto closed = [&] { return events.size() == 2 && events.back() == SessionEvent::closed; };
  EXPECT_TRUE(poll_until(server, {}, closed, {}, std::chrono::seconds(2)))
      << "the server still holds the session of a client that is gone";
}

}  // namespace
}  // namespace rdmakit::rpc::testing

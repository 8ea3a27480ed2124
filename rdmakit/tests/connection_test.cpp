// Connections through both back ends on one host: the handshake, user data both ways, many
// clients at once on shared resources, mismatched and silent peers, and a peer killed in the
// middle of operations.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <thread>

#include "rdmakit/async_queue_pair.hpp"
#include "rdmakit/cm_connection.hpp"
#include "rdmakit/poller.hpp"
#include "rdmakit/tcp_connection.hpp"
#include "support/listening.hpp"
#include "support/subprocess.hpp"

namespace rdmakit {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

std::vector<std::byte> bytes_of(std::string_view text) {
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return {p, p + text.size()};
}

// Both back ends behind one interface.
template <typename AcceptorT, typename ConnectorT>
struct Backend {
  using Acceptor = AcceptorT;
  using Connector = ConnectorT;
  static constexpr bool kCm = std::is_same_v<AcceptorT, CmAcceptor>;
  static std::shared_ptr<Resources> resources() {
    ResourceOptions options;
    options.for_rdma_cm = kCm;
    return Resources::open(options);
  }
};
using Tcp = Backend<TcpAcceptor, TcpConnector>;
using Cm = Backend<CmAcceptor, CmConnector>;

// One client thread per element of `connected`, all connecting to `port` at once; each
// connection lands in its element. The caller joins the threads.
template <typename B>
std::vector<std::thread> connect_at_once(const std::shared_ptr<Resources>& resources, uint16_t port,
                                         std::vector<Connection>& connected) {
  std::vector<std::thread> clients;
  for (Connection& slot : connected)
    clients.emplace_back([resources, port, &slot] {
      typename B::Connector connector(resources);
      std::error_code ec;
      slot = connector.connect("127.0.0.1", port, ec);
      if (ec) ADD_FAILURE() << connector.explanation();
    });
  return clients;
}

// What an event loop's acceptor gave: the connections, and its longest accept_ready() call.
struct ReadyAccepts {
  std::vector<Connection> accepted;
  std::chrono::steady_clock::duration longest{};
};

// Calls acceptor.accept_ready() as an event loop would, whenever ready_fd() is readable and
// at least every 10 ms, until `done(accepted)` or `limit`.
template <typename AcceptorT, typename Done>
ReadyAccepts accept_ready_until(AcceptorT& acceptor, Done done,
                                std::chrono::steady_clock::duration limit) {
  ReadyAccepts out;
  const auto start = std::chrono::steady_clock::now();
  while (!done(out.accepted) && std::chrono::steady_clock::now() - start < limit) {
    pollfd p{acceptor.ready_fd(), POLLIN, 0};
    ::poll(&p, 1, 10);
    const auto before = std::chrono::steady_clock::now();
    Connection c = acceptor.accept_ready();
    out.longest = std::max(out.longest, std::chrono::steady_clock::now() - before);
    if (c) out.accepted.push_back(std::move(c));
  }
  return out;
}

template <typename B>
class Connections : public ::testing::Test {};
using Backends = ::testing::Types<Tcp, Cm>;
TYPED_TEST_SUITE(Connections, Backends);

TYPED_TEST(Connections, HandshakeCarriesUserDataBothWaysAndNegotiates) {
  auto server_res = TypeParam::resources();
  auto client_res = TypeParam::resources();
  ConnectionOptions server_options;
  server_options.user_data = bytes_of("from the server");
  server_options.caps.rd_atomic = 4;
  typename TypeParam::Acceptor acceptor(server_res, "127.0.0.1", 0, server_options);
  Connection server;
  std::thread accepting([&] { server = acceptor.accept(); });
  ConnectionOptions client_options;
  client_options.user_data = bytes_of("from the client");
  client_options.caps.rd_atomic = 8;
  typename TypeParam::Connector connector(client_res, client_options);
  Connection client = connector.connect("127.0.0.1", acceptor.port());
  accepting.join();
  ASSERT_TRUE(client);
  ASSERT_TRUE(server);
  EXPECT_EQ(client.peer_data(), bytes_of("from the server"));
  EXPECT_EQ(server.peer_data(), bytes_of("from the client"));
  EXPECT_EQ(client.negotiated().path.initiator_depth, 4);  // the smaller offer wins
  EXPECT_EQ(server.negotiated().path.initiator_depth, 4);
  EXPECT_EQ(client.negotiated().path.mtu, server.negotiated().path.mtu);
  EXPECT_EQ(client.qp().state(), IBV_QPS_RTS);
  EXPECT_EQ(client.peer().address.qpn, server.qp().qpn());
  EXPECT_EQ(server.peer().address.qpn, client.qp().qpn());
  EXPECT_THAT(client.summary(), HasSubstr(TypeParam::kCm ? "via rdma_cm" : "via tcp"));

  // The connection carries RDMA: the client writes into the server's memory.
  std::vector<std::byte> target(64), source(64, std::byte{0x5a});
  MemoryRegion target_mr = server_res->pd.register_memory(target.data(), 64, Access::all);
  MemoryRegion source_mr = client_res->pd.register_memory(source.data(), 64, Access::all);
  Poller poller(client_res->cq);
  AsyncQueuePair qp(poller, client.qp());
  std::error_code result = make_error_code(Errc::timed_out);
  auto write = [&]() -> Task<void> {
    result = co_await qp.write(source_mr.local(), target_mr.remote());
  };
  Task<void> task = write();
  task.start();
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!task.done() && std::chrono::steady_clock::now() < deadline) poller.poll();
  EXPECT_FALSE(result) << result.message();
  EXPECT_EQ(target, source);
}

TYPED_TEST(Connections, ManyClientsAtOnceShareOneParent) {
  auto server_res = TypeParam::resources();
  auto client_res = TypeParam::resources();
  typename TypeParam::Acceptor acceptor(server_res, "127.0.0.1", 0);
  constexpr int kClients = 24;
  std::vector<Connection> accepted(kClients), connected(kClients);
  std::thread accepting([&] {
    for (auto& c : accepted) {
      std::error_code ec;
      c = acceptor.accept_for(10s, ec);
      if (ec) ADD_FAILURE() << acceptor.explanation();
    }
  });
  std::vector<std::thread> clients =
      connect_at_once<TypeParam>(client_res, acceptor.port(), connected);
  for (auto& t : clients) t.join();
  accepting.join();
  for (int i = 0; i < kClients; ++i) {
    EXPECT_TRUE(connected[static_cast<size_t>(i)]);
    EXPECT_TRUE(accepted[static_cast<size_t>(i)]);
    // One PD and one CQ for all of them.
    EXPECT_EQ(connected[static_cast<size_t>(i)].qp().get()->pd, client_res->pd.get());
    EXPECT_EQ(accepted[static_cast<size_t>(i)].qp().get()->send_cq, server_res->cq.get());
  }
}

// An event loop's acceptor: clients connecting at once are all accepted by calls that each
// return at once, polled on ready_fd().
TYPED_TEST(Connections, AcceptReadyServesClientsArrivingAtOnceWithoutWaiting) {
  auto server_res = TypeParam::resources();
  auto client_res = TypeParam::resources();
  typename TypeParam::Acceptor acceptor(server_res, "127.0.0.1", 0);
  constexpr int kClients = 12;
  std::vector<Connection> connected(kClients);
  std::vector<std::thread> clients =
      connect_at_once<TypeParam>(client_res, acceptor.port(), connected);
  ReadyAccepts got = accept_ready_until(
      acceptor, [](const std::vector<Connection>& accepted) { return accepted.size() == kClients; },
      20s);
  for (auto& t : clients) t.join();
  ASSERT_EQ(got.accepted.size(), size_t{kClients}) << acceptor.explanation();
  for (const Connection& c : connected) EXPECT_TRUE(c);
  for (Connection& c : got.accepted) EXPECT_EQ(c.qp().state(), IBV_QPS_RTS);
  EXPECT_LT(got.longest, 500ms) << "accept_ready() waited";
}

TYPED_TEST(Connections, NoListenerIsAPlainError) {
  auto res = TypeParam::resources();
  ConnectionOptions options;
  options.timeout = 2s;
  typename TypeParam::Connector connector(res, options);
  std::error_code ec;
  Connection c =
      connector.connect("127.0.0.1", static_cast<uint16_t>(testing::free_tcp_port()), ec);
  EXPECT_TRUE(ec);
  EXPECT_FALSE(c);
  EXPECT_FALSE(connector.explanation().empty());
  EXPECT_THROW(connector.connect("127.0.0.1", static_cast<uint16_t>(testing::free_tcp_port())),
               Error);
}

TYPED_TEST(Connections, MismatchedGidsFailWithTheExplanationOnBothSides) {
  auto probe = Context::open();
  const auto& gids = probe.port_info().gids;
  const bool has_routable = gids.size() >= 2 && (gids.front().ipv4() >> 24) != 127;
  if (!has_routable) GTEST_SKIP() << "this host has no IPv4 address besides loopback";
  ResourceOptions loopback_options;
  loopback_options.for_rdma_cm = TypeParam::kCm;
  loopback_options.device.gid_index = gids.back().index;  // 127.0.0.1
  auto server_res = Resources::open(loopback_options);
  auto client_res = TypeParam::resources();  // routable address
  typename TypeParam::Acceptor acceptor(server_res, "0.0.0.0", 0);
  std::error_code server_ec;
  std::thread accepting([&] { acceptor.accept_for(10s, server_ec); });
  typename TypeParam::Connector connector(client_res);
  std::error_code client_ec;
  // Over RDMA CM the address decides the GID: connect to the routable one.
  Connection c = connector.connect(TypeParam::kCm ? probe.gid().entry.address() : "127.0.0.1",
                                   acceptor.port(), client_ec);
  accepting.join();
  if (TypeParam::kCm) {
    // The CM derives both GIDs from the IP route, so the override cannot create a mismatch.
    EXPECT_FALSE(client_ec) << connector.explanation();
    return;
  }
  EXPECT_EQ(server_ec, Errc::handshake_mismatch);
  EXPECT_THAT(acceptor.explanation(), HasSubstr("subnets differ"));
  EXPECT_THAT(acceptor.explanation(), HasSubstr("127.0.0.1"));
  EXPECT_EQ(client_ec, Errc::handshake_mismatch);
  EXPECT_THAT(connector.explanation(), HasSubstr("the peer refused: subnets differ"));
}

TEST(TcpHandshake, AnotherVersionIsRefusedWithAnExplanation) {
  auto res = Resources::open();
  TcpAcceptor acceptor(res, "127.0.0.1", 0);
  std::error_code server_ec;
  std::thread accepting([&] { acceptor.accept_for(10s, server_ec); });
  // A client from the future: a well-formed frame with handshake version 2.
  std::error_code ec;
  int fd = -1;
  {
    HandshakeOffer future;
    future.version = 2;
    std::vector<std::byte> payload = encode(future, OfferForm::full);
    std::vector<std::byte> frame{std::byte{'O'}};
    const uint32_t len = static_cast<uint32_t>(payload.size());
    frame.resize(5);
    std::memcpy(frame.data() + 1, &len, 4);
    frame.insert(frame.end(), payload.begin(), payload.end());
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(acceptor.port());
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin), 0);
    ASSERT_EQ(write(fd, frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
  }
  accepting.join();
  EXPECT_EQ(server_ec, Errc::handshake_version);
  EXPECT_THAT(acceptor.explanation(),
              HasSubstr("the peer speaks handshake version 2, this side version 1"));
  char reply[256] = {};
  const ssize_t n = read(fd, reply, sizeof reply);
  close(fd);
  ASSERT_GT(n, 6);
  EXPECT_EQ(reply[0], 'R');
  EXPECT_THAT(std::string(reply + 6, static_cast<size_t>(n - 6)), HasSubstr("handshake version"));
}

TEST(TcpHandshake, ASilentPeerTimesOut) {
  // A socket that listens (the kernel completes connections) but never answers.
  const int silent = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&sin), sizeof sin), 0);
  ASSERT_EQ(listen(silent, 4), 0);
  socklen_t len = sizeof sin;
  getsockname(silent, reinterpret_cast<sockaddr*>(&sin), &len);
  auto res = Resources::open();
  ConnectionOptions options;
  options.timeout = 300ms;
  TcpConnector connector(res, options);
  std::error_code ec;
  const auto start = std::chrono::steady_clock::now();
  connector.connect("127.0.0.1", ntohs(sin.sin_port), ec);
  close(silent);
  EXPECT_EQ(ec, Errc::timed_out);
  EXPECT_THAT(connector.explanation(), HasSubstr("reading the peer's offer: timed out"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

// An event loop's acceptor: a client that connects and says nothing never holds up the
// others' handshakes, each call returns at once, and the silent one is dropped after the
// timeout.
TEST(TcpHandshake, AcceptReadyNeverWaitsForASilentClient) {
  auto server_res = Resources::open();
  auto client_res = Resources::open();
  ConnectionOptions options;
  options.timeout = 300ms;
  TcpAcceptor acceptor(server_res, "127.0.0.1", 0, options);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(acceptor.port());
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int silent = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(connect(silent, reinterpret_cast<sockaddr*>(&sin), sizeof sin), 0);
  Connection client;
  std::thread connecting([&] {
    TcpConnector connector(client_res);
    std::error_code ec;
    client = connector.connect("127.0.0.1", acceptor.port(), ec);
    if (ec) ADD_FAILURE() << connector.explanation();
  });
  // Until the client is served and the silent one dropped.
  ReadyAccepts got = accept_ready_until(
      acceptor,
      [&](const std::vector<Connection>& accepted) {
        return !accepted.empty() && !acceptor.explanation().empty();
      },
      3s);
  connecting.join();
  close(silent);
  ASSERT_EQ(got.accepted.size(), 1u);
  ASSERT_TRUE(client);
  Connection& server = got.accepted.front();
  EXPECT_EQ(server.qp().state(), IBV_QPS_RTS);
  EXPECT_EQ(client.peer().address.qpn, server.qp().qpn());
  EXPECT_LT(got.longest, 100ms) << "accept_ready() waited";
  EXPECT_THAT(acceptor.explanation(), HasSubstr("did not finish its handshake in time"));
}

TYPED_TEST(Connections, PeerKilledMidOperationCompletesEveryAwaiterWithAnError) {
  const int port = testing::free_tcp_port();
  testing::Process peer({RDMAKIT_TEST_PEER, TypeParam::kCm ? "cm" : "tcp", std::to_string(port)});
  auto res = TypeParam::resources();
  ConnectionOptions options;
  options.timers.timeout = 8;  // ~1 ms per attempt: the lost peer is noticed quickly
  options.timers.retry_count = 2;
  typename TypeParam::Connector connector(res, options);
  ASSERT_TRUE(testing::wait_listening(port, 10s, peer.pid()));
  std::error_code ec;
  Connection c = connector.connect("127.0.0.1", static_cast<uint16_t>(port), ec);
  ASSERT_TRUE(c) << connector.explanation();
  ASSERT_EQ(c.peer_data().size(), RemoteBuffer::kWireSize);
  const RemoteBuffer remote =
      RemoteBuffer::decode(std::span<const std::byte, RemoteBuffer::kWireSize>(c.peer_data()));
  std::vector<std::byte> local(1 << 20);
  MemoryRegion mr = res->pd.register_memory(local.data(), local.size(), Access::all);
  Poller poller(res->cq);
  AsyncQueuePair qp(poller, c.qp());
  constexpr int kOps = 64;
  int finished = 0, failed = 0;
  auto reader = [&](int n) -> Task<void> {
    std::error_code e = co_await qp.read(mr.local().subspan(static_cast<size_t>(n) * 16384, 16384),
                                         remote.subspan(static_cast<size_t>(n) * 16384, 16384));
    ++finished;
    if (e) ++failed;
  };
  auto receiver = [&]() -> Task<void> {
    Received r = co_await qp.recv(mr.local().first(64));
    ++finished;
    if (r.error) ++failed;
  };
  spawn(receiver());
  ::kill(peer.pid(), SIGKILL);
  peer.wait(5s);
  for (int i = 0; i < kOps; ++i) spawn(reader(i));
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (finished < kOps + 1 && std::chrono::steady_clock::now() < deadline) poller.poll();
  EXPECT_EQ(finished, kOps + 1);
  EXPECT_GE(failed, 1);
  EXPECT_TRUE(qp.failed());
  EXPECT_EQ(qp.in_flight(), 0u);
}

}  // namespace
}  // namespace rdmakit

// The connection manager at scale: many ids on one channel, a listener's backlog that fills
// and frees again, 64 connections set up, accepted and torn down concurrently, and a
// descriptor table that does not stall the process as connections add descriptors.
#include <poll.h>
#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>

#include "cm_fixture.hpp"
#include "fork_child.hpp"

namespace softrdma_test {
namespace {

/// The next event of `a` or `b` (and which channel it came from); fails the test if none
/// arrives within `timeout`.
std::optional<CmEvent> next_event_of(rdma_event_channel* a, rdma_event_channel* b,
                                     rdma_event_channel** from, Millis timeout = kTimeout) {
  *from = a;
  if (a == b) return next_event(a, timeout);
  pollfd fds[2] = {{a->fd, POLLIN, 0}, {b->fd, POLLIN, 0}};
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    const int n = poll(fds, 2, static_cast<int>(std::max<Millis::rep>(left.count(), 0)));
    if (n > 0) {
      *from = (fds[0].revents & POLLIN) ? a : b;
      return next_event(*from, Millis{0});
    }
    if (n == 0 || errno != EINTR) break;
  }
  ADD_FAILURE() << "no CM event within " << timeout.count() << " ms";
  return std::nullopt;
}

QpCaps small_caps() {
  QpCaps caps;
  caps.send_wr = 4;
  caps.recv_wr = 4;
  caps.send_sge = 1;
  caps.recv_sge = 1;
  caps.inline_data = 0;
  return caps;
}

/// Many clients (on one channel) connecting to one listener (on the same channel or its
/// own), all driven by one event loop: resolve, route, QP, connect; the server accepts each
/// request with a QP. A client's private data is its index, which the accept echoes.
class CmMany : public CmTest {
 protected:
  struct Client {
    rdma_cm_id* id = nullptr;
    rdma_cm_id* server = nullptr;  // the listener's new id for this client
    int step = 0;                  // 0 resolving, 1 route, 2 connecting, 3 established
    bool server_established = false;
    int disconnected = 0;  // DISCONNECTED events of the client and of its server id
    int timewait = 0;      // TIMEWAIT_EXIT events of both
  };

  /// The listener on `server_ch`, `n` clients on `client_ch`; every client starts resolving.
  void Start(rdma_event_channel* client_ch, rdma_event_channel* server_ch, size_t n) {
    client_ch_ = client_ch;
    server_ch_ = server_ch;
    listener_ = Listen(server_ch, &port_, static_cast<int>(2 * n));
    ASSERT_NE(listener_, nullptr);
    listener_->context = &listener_tag_;
    client_cq_ = NewCq(static_cast<int>(8 * n));
    server_cq_ = NewCq(static_cast<int>(8 * n));
    ASSERT_TRUE(client_cq_ && server_cq_);
    clients_.reserve(n);  // ids point at their Client: no reallocation
    for (size_t i = 0; i < n; ++i) {
      clients_.emplace_back();
      Client& c = clients_.back();
      c.id = NewId(client_ch, RDMA_PS_TCP, &c);
      ASSERT_NE(c.id, nullptr);
      sockaddr_in dst = loopback(port_);
      ASSERT_EQ(rdma_resolve_addr(c.id, nullptr, as_sockaddr(&dst), kResolveTimeoutMs), 0)
          << std::strerror(errno);
    }
  }

  /// The client whose id is `id`, or null (a server id, or a stranger).
  Client* client_of(rdma_cm_id* id) {
    for (Client& c : clients_)
      if (c.id == id) return &c;
    return nullptr;
  }
  Client* client_of_server(rdma_cm_id* id) {
    auto it = by_server_.find(id);
    return it == by_server_.end() ? nullptr : &clients_[it->second];
  }
  size_t index_of(const Client* c) const { return static_cast<size_t>(c - clients_.data()); }

  /// Drives the set-up until every client and every server id is established.
  void RunUntilEstablished(Millis limit) {
    const auto deadline = Clock::now() + limit;
    size_t established = 0;
    while (established < 2 * clients_.size()) {
      const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
      rdma_event_channel* from = nullptr;
      std::optional<CmEvent> e = next_event_of(client_ch_, server_ch_, &from, left);
      ASSERT_TRUE(e) << established << " of " << 2 * clients_.size() << " established";
      SCOPED_TRACE(describe(*e));
      ASSERT_EQ(e->status, 0);
      Client* c = client_of(e->id);
      if (c) {
        ASSERT_EQ(from, client_ch_) << "a client's event on another channel";
        EXPECT_EQ(e->id->context, c) << "the id's context";
      } else if (e->type != RDMA_CM_EVENT_CONNECT_REQUEST) {
        c = client_of_server(e->id);
        ASSERT_NE(c, nullptr) << "an event for an unknown id";
        ASSERT_EQ(from, server_ch_) << "a server id's event on another channel";
      }
      switch (e->type) {
        case RDMA_CM_EVENT_ADDR_RESOLVED:
          ASSERT_NE(c, nullptr);
          ASSERT_EQ(c->step, 0);
          c->step = 1;
          ASSERT_EQ(rdma_resolve_route(c->id, kResolveTimeoutMs), 0) << std::strerror(errno);
          break;
        case RDMA_CM_EVENT_ROUTE_RESOLVED: {
          ASSERT_NE(c, nullptr);
          ASSERT_EQ(c->step, 1);
          c->step = 2;
          ASSERT_NE(CreateQp(c->id, client_cq_, IBV_QPT_RC, small_caps()), nullptr);
          const std::vector<uint8_t> data = {static_cast<uint8_t>(index_of(c))};
          rdma_conn_param param = conn_param(data);
          ASSERT_EQ(rdma_connect(c->id, &param), 0) << std::strerror(errno);
          break;
        }
        case RDMA_CM_EVENT_CONNECT_REQUEST: {
          ASSERT_EQ(from, server_ch_);
          ASSERT_EQ(e->listen_id, listener_);
          ASSERT_FALSE(e->private_data.empty());
          const size_t index = e->private_data[0];
          ASSERT_LT(index, clients_.size());
          Client& owner = clients_[index];
          ASSERT_EQ(owner.server, nullptr) << "two requests from client " << index;
          ASSERT_EQ(owner.step, 2);
          EXPECT_EQ(e->conn.qp_num, owner.id->qp->qp_num);
          owner.server = Own(e->id);
          by_server_[e->id] = index;
          EXPECT_EQ(e->id->context, &listener_tag_) << "a new id inherits the listener's";
          EXPECT_EQ(e->id->channel, server_ch_);
          ASSERT_NE(CreateQp(e->id, server_cq_, IBV_QPT_RC, small_caps()), nullptr);
          rdma_conn_param param = conn_param(e->private_data);
          ASSERT_EQ(rdma_accept(e->id, &param), 0) << std::strerror(errno);
          break;
        }
        case RDMA_CM_EVENT_ESTABLISHED:
          if (e->id == c->id) {
            ASSERT_EQ(c->step, 2);
            c->step = 3;
            ASSERT_NE(c->server, nullptr);
            ASSERT_FALSE(e->private_data.empty());
            EXPECT_EQ(e->private_data[0], index_of(c)) << "the accept of another client";
            EXPECT_EQ(e->conn.qp_num, c->server->qp->qp_num);
          } else {
            ASSERT_FALSE(c->server_established);
            c->server_established = true;
          }
          ++established;
          break;
        default:
          FAIL() << "unexpected event";
      }
    }
    for (const Client& c : clients_) {
      EXPECT_EQ(qp_state(c.id->qp), IBV_QPS_RTS);
      EXPECT_EQ(qp_state(c.server->qp), IBV_QPS_RTS);
      ibv_qp_attr attr{};
      ibv_qp_init_attr init{};
      ASSERT_EQ(ibv_query_qp(c.id->qp, &attr, IBV_QP_DEST_QPN, &init), 0);
      EXPECT_EQ(attr.dest_qp_num, c.server->qp->qp_num) << "client " << index_of(&c);
    }
  }

  /// Every client disconnects; DISCONNECTED on each id, then TIMEWAIT_EXIT on each.
  void DisconnectAll(Millis limit) {
    for (Client& c : clients_) ASSERT_EQ(rdma_disconnect(c.id), 0) << std::strerror(errno);
    const auto deadline = Clock::now() + limit;
    size_t disconnected = 0, timewait = 0;
    while (disconnected < 2 * clients_.size() || timewait < 2 * clients_.size()) {
      const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
      rdma_event_channel* from = nullptr;
      std::optional<CmEvent> e = next_event_of(client_ch_, server_ch_, &from, left);
      ASSERT_TRUE(e) << disconnected << " DISCONNECTED and " << timewait << " TIMEWAIT_EXIT of "
                     << 2 * clients_.size();
      SCOPED_TRACE(describe(*e));
      Client* c = client_of(e->id);
      if (!c) c = client_of_server(e->id);
      ASSERT_NE(c, nullptr) << "an event for an unknown id";
      if (e->type == RDMA_CM_EVENT_DISCONNECTED) {
        ASSERT_LT(c->disconnected, 2);
        ASSERT_EQ(c->timewait, 0) << "TIMEWAIT_EXIT before DISCONNECTED";
        ++c->disconnected;
        ++disconnected;
      } else {
        ASSERT_EQ(e->type, RDMA_CM_EVENT_TIMEWAIT_EXIT);
        ASSERT_LT(c->timewait, 2);
        ++c->timewait;
        ++timewait;
      }
    }
    for (const Client& c : clients_) {
      EXPECT_EQ(qp_state(c.id->qp), IBV_QPS_ERR);
      EXPECT_EQ(qp_state(c.server->qp), IBV_QPS_ERR);
    }
  }

  rdma_event_channel* client_ch_ = nullptr;
  rdma_event_channel* server_ch_ = nullptr;
  rdma_cm_id* listener_ = nullptr;
  int listener_tag_ = 0;
  uint16_t port_ = 0;
  ibv_cq* client_cq_ = nullptr;
  ibv_cq* server_cq_ = nullptr;
  std::vector<Client> clients_;
  std::map<rdma_cm_id*, size_t> by_server_;
};

// ---------------------------------------------------------------------------------------------
// 7. Sixteen clients and their listener on one channel.

TEST_F(CmMany, SixteenClientsAndListenerOnOneChannel) {
  rdma_event_channel* ch = NewChannel();
  ASSERT_NE(ch, nullptr);
  ASSERT_NO_FATAL_FAILURE(Start(ch, ch, 16));
  ASSERT_NO_FATAL_FAILURE(RunUntilEstablished(Millis{10000}));
  // Traffic on every connection: client i sends its index to its server id.
  Buffer mem = NewBuffer(16 * 64);
  for (size_t i = 0; i < clients_.size(); ++i)
    ASSERT_EQ(post_recv(clients_[i].server->qp, i, {mem.sge(i * 64, 64)}), 0);
  Buffer out = NewBuffer(16 * 64);
  for (size_t i = 0; i < clients_.size(); ++i) {
    std::memset(out.data() + i * 64, static_cast<int>(0x40 + i), 64);
    ASSERT_EQ(post_send(clients_[i].id->qp, send_wr(i), {out.sge(i * 64, 64)}), 0);
  }
  EXPECT_EQ(poll_n(client_cq_, clients_.size()).size(), clients_.size());
  for (const ibv_wc& wc : poll_n(server_cq_, clients_.size())) {
    ASSERT_TRUE(completed(wc, wc.wr_id));
    ASSERT_LT(wc.wr_id, clients_.size());
    EXPECT_EQ(wc.qp_num, clients_[wc.wr_id].server->qp->qp_num);
    EXPECT_EQ(wc.src_qp, clients_[wc.wr_id].id->qp->qp_num);
    EXPECT_TRUE(mem.all(static_cast<uint8_t>(0x40 + wc.wr_id), wc.wr_id * 64, 64));
  }
  EXPECT_TRUE(no_event(ch));
}

// ---------------------------------------------------------------------------------------------
// 9. 64 connections at once, on a client channel and a server channel.

TEST_F(CmMany, SixtyFourConcurrentConnectionsAcceptedAndDisconnected) {
  rdma_event_channel* client_ch = NewChannel();
  rdma_event_channel* server_ch = NewChannel();
  ASSERT_TRUE(client_ch && server_ch);
  const auto start = Clock::now();
  ASSERT_NO_FATAL_FAILURE(Start(client_ch, server_ch, 64));
  ASSERT_NO_FATAL_FAILURE(RunUntilEstablished(Millis{10000}));
  const auto established = Clock::now();
  ASSERT_NO_FATAL_FAILURE(DisconnectAll(Millis{10000}));
  const auto done = Clock::now();
  EXPECT_TRUE(no_event(client_ch));
  EXPECT_TRUE(no_event(server_ch));
  const auto ms = [](auto d) { return std::chrono::duration_cast<Millis>(d).count(); };
  RecordProperty("setup_ms", std::to_string(ms(established - start)));
  RecordProperty("teardown_ms", std::to_string(ms(done - established)));
  EXPECT_LT(ms(established - start), 5000) << "64 connections took too long to set up";
}

// ---------------------------------------------------------------------------------------------
// 8. A backlog of 2: the excess requests are rejected until the pending ones are answered.

class CmBacklog : public CmTest {
 protected:
  /// `n` clients on `ch`, resolved towards 127.0.0.1:port and with QPs, then all connecting
  /// (resolved first: the listener's events share the channel).
  std::vector<rdma_cm_id*> Connect(rdma_event_channel* ch, uint16_t port, ibv_cq* cq, size_t n) {
    std::vector<rdma_cm_id*> ids;
    for (size_t i = 0; i < n; ++i) {
      rdma_cm_id* id = NewId(ch);
      if (!id) return {};
      Resolve(ch, id, port);
      if (::testing::Test::HasFatalFailure() || !CreateQp(id, cq)) return {};
      ids.push_back(id);
    }
    for (rdma_cm_id* id : ids) {
      if (rdma_connect(id, nullptr) != 0) {
        ADD_FAILURE() << "rdma_connect: " << std::strerror(errno);
        return {};
      }
    }
    return ids;
  }
};

TEST_F(CmBacklog, FullBacklogRejectsTheExcessUntilRequestsAreAnswered) {
  rdma_event_channel* ch = NewChannel();
  ASSERT_NE(ch, nullptr);
  uint16_t port = 0;
  rdma_cm_id* listener = Listen(ch, &port, 2);
  ibv_cq* cq = NewCq(1024);
  ASSERT_TRUE(listener && cq);

  const std::vector<rdma_cm_id*> clients = Connect(ch, port, cq, 4);
  ASSERT_EQ(clients.size(), 4u);
  // The server answers nothing yet: two requests are delivered, two clients rejected.
  std::vector<CmEvent> requests;
  std::vector<rdma_cm_id*> rejected;
  while (requests.size() + rejected.size() < clients.size()) {
    std::optional<CmEvent> e = next_event(ch);
    ASSERT_TRUE(e);
    if (e->type == RDMA_CM_EVENT_CONNECT_REQUEST) {
      EXPECT_EQ(e->listen_id, listener);
      Own(e->id);
      requests.push_back(*e);
    } else {
      ASSERT_EQ(e->type, RDMA_CM_EVENT_REJECTED) << describe(*e);
      EXPECT_EQ(e->status, kRejectConsumer);
      ASSERT_NE(std::find(clients.begin(), clients.end(), e->id), clients.end());
      rejected.push_back(e->id);
    }
  }
  EXPECT_EQ(requests.size(), 2u) << "a backlog of 2 holds 2 requests";
  EXPECT_EQ(rejected.size(), 2u);
  EXPECT_TRUE(no_event(ch, Millis{200}));
  ASSERT_EQ(requests.size(), 2u);

  // Which clients are waiting: the requests name their QPs.
  auto client_with_qpn = [&](uint32_t qpn) -> rdma_cm_id* {
    for (rdma_cm_id* c : clients)
      if (c->qp->qp_num == qpn) return c;
    return nullptr;
  };
  rdma_cm_id* waiting0 = client_with_qpn(requests[0].conn.qp_num);
  rdma_cm_id* waiting1 = client_with_qpn(requests[1].conn.qp_num);
  ASSERT_TRUE(waiting0 && waiting1 && waiting0 != waiting1);
  EXPECT_EQ(std::find(rejected.begin(), rejected.end(), waiting0), rejected.end());
  EXPECT_EQ(std::find(rejected.begin(), rejected.end(), waiting1), rejected.end());

  // Accept the first, reject the second.
  rdma_cm_id* server0 = requests[0].id;
  ASSERT_NE(CreateQp(server0, cq), nullptr);
  ASSERT_EQ(rdma_accept(server0, nullptr), 0) << std::strerror(errno);
  std::vector<rdma_cm_id*> pending = {server0, waiting0};
  while (!pending.empty()) {
    std::optional<CmEvent> e = next_event(ch);
    ASSERT_TRUE(e);
    ASSERT_EQ(e->type, RDMA_CM_EVENT_ESTABLISHED) << describe(*e);
    auto it = std::find(pending.begin(), pending.end(), e->id);
    ASSERT_NE(it, pending.end());
    pending.erase(it);
  }
  ASSERT_EQ(rdma_reject(requests[1].id, nullptr, 0), 0);
  ASSERT_TRUE(expect_event(ch, RDMA_CM_EVENT_REJECTED, waiting1, kRejectConsumer));

  // Both slots are free again: two new clients are both heard and accepted.
  const std::vector<rdma_cm_id*> later = Connect(ch, port, cq, 2);
  ASSERT_EQ(later.size(), 2u);
  std::vector<rdma_cm_id*> servers;
  for (int i = 0; i < 2; ++i) {
    std::optional<CmEvent> e = next_event(ch);
    ASSERT_TRUE(e);
    ASSERT_EQ(e->type, RDMA_CM_EVENT_CONNECT_REQUEST) << describe(*e) << " for id " << e->id;
    servers.push_back(Own(e->id));
  }
  for (rdma_cm_id* s : servers) {
    ASSERT_NE(CreateQp(s, cq), nullptr);
    ASSERT_EQ(rdma_accept(s, nullptr), 0) << std::strerror(errno);
  }
  pending = {servers[0], servers[1], later[0], later[1]};
  while (!pending.empty()) {
    std::optional<CmEvent> e = next_event(ch);
    ASSERT_TRUE(e);
    ASSERT_EQ(e->type, RDMA_CM_EVENT_ESTABLISHED) << describe(*e);
    auto it = std::find(pending.begin(), pending.end(), e->id);
    ASSERT_NE(it, pending.end());
    pending.erase(it);
  }
  EXPECT_TRUE(no_event(ch));
}

TEST_F(CmBacklog, SlotIsFreedWhenTheRequesterGoesAway) {
  rdma_event_channel* ch = NewChannel();
  ASSERT_NE(ch, nullptr);
  uint16_t port = 0;
  rdma_cm_id* listener = Listen(ch, &port, 1);
  ibv_cq* cq = NewCq();
  ASSERT_TRUE(listener && cq);

  const std::vector<rdma_cm_id*> first = Connect(ch, port, cq, 1);
  ASSERT_EQ(first.size(), 1u);
  std::optional<CmEvent> req = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, nullptr);
  ASSERT_TRUE(req);
  rdma_cm_id* abandoned = Own(req->id);
  // The requester gives up before the server answers; the server then drops the request.
  DestroyIdNow(first[0]);
  const auto settle = Clock::now() + Millis{300};
  while (Clock::now() < settle) {
    std::optional<CmEvent> e = try_next_event(ch, Millis{20});
    if (e) {
      EXPECT_EQ(e->id, abandoned) << "unexpected " << describe(*e);
    }
  }
  DestroyIdNow(abandoned);

  const std::vector<rdma_cm_id*> later = Connect(ch, port, cq, 1);
  ASSERT_EQ(later.size(), 1u);
  rdma_cm_id* second = later[0];
  std::optional<CmEvent> e = next_event(ch);
  ASSERT_TRUE(e);
  ASSERT_EQ(e->type, RDMA_CM_EVENT_CONNECT_REQUEST) << describe(*e);
  EXPECT_EQ(e->listen_id, listener);
  ASSERT_EQ(rdma_reject(Own(e->id), nullptr, 0), 0);
  ASSERT_TRUE(expect_event(ch, RDMA_CM_EVENT_REJECTED, second, kRejectConsumer));
}

// Each connection holds descriptors, and growing the descriptor table of a process with
// threads waits for an RCU grace period (10-25 ms): the library grows it once when it is
// loaded, and again in a forked child, so connection 81 costs what connection 80 did.
size_t descriptor_table_size() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("FDSize:", 0) == 0) return std::stoul(line.substr(7));
  return 0;
}

size_t expected_descriptor_table() {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  return std::min<size_t>(limit.rlim_cur, 4096);
}

TEST(CmDescriptors, TableIsGrownWhenTheLibraryLoadsAndInForkedChildren) {
  const size_t expected = expected_descriptor_table();
  EXPECT_GE(descriptor_table_size(), expected);
  Link link;
  ASSERT_TRUE(link.ok());
  Child child(link, [expected] { return descriptor_table_size() >= expected ? 0 : 1; });
  ASSERT_TRUE(child.started());
  EXPECT_TRUE(exited_with(child.Wait(), 0))
      << "a forked child's table is smaller than " << expected;
}

}  // namespace
}  // namespace softrdma_test

// The connection manager's links: one TCP connection carries every connection a process
// makes to one listener (cm/cm_wire.hpp). Connections share a link and still end one by
// one; an idle link carries the next connection; a link that outlived its listener sends
// the next request to a new one; a malformed message closes only its own link; a message
// for a connection that already ended is ignored, but a disconnect is still answered.
// Also the waiter that serves the sockets: events it posts and does not take keep the
// channel's fd readable, and what arrives after it returned reaches an application that
// only polls the fd.
#include <poll.h>

#include <cstring>
#include <thread>

#include "cm/cm_wire.hpp"
#include "cm_fixture.hpp"

namespace softrdma_test {
namespace {

namespace cm = softrdma::cm;

class CmLink : public CmConnTest {
 protected:
  // SENDs `byte` from the pair's client to its server and checks it arrives.
  void ExpectSendArrives(const Pair& p, Buffer& mem, uint8_t byte) {
    mem.data()[0] = byte;
    ASSERT_EQ(post_recv(p.server->qp, 7, {mem.sge(64, 64)}), 0);
    ASSERT_EQ(post_send(p.client->qp, send_wr(8), {mem.sge(0, 1)}), 0);
    EXPECT_TRUE(completed(poll_one(p.client_cq), 8, IBV_WC_SUCCESS));
    EXPECT_TRUE(completed(poll_one(p.server_cq), 7, IBV_WC_SUCCESS));
    EXPECT_EQ(mem.data()[64], byte);
  }
};

// The next event, from a thread blocked in rdma_get_cm_event (which serves the CM's
// sockets meanwhile) rather than one that waits for the fd first, as next_event does.
CmEvent blocking_next_event(rdma_event_channel* ch) {
  CmEvent out;
  rdma_cm_event* e = nullptr;
  if (rdma_get_cm_event(ch, &e) != 0) return out;
  out.type = e->event;
  out.status = e->status;
  out.id = e->id;
  out.listen_id = e->listen_id;
  rdma_ack_cm_event(e);
  return out;
}

// A raw TCP connection to the listener's port, speaking the CM's messages.
class RawLink {
 public:
  // `receive_buffer`: a small one makes the CM's answers back up in its socket at once.
  explicit RawLink(uint16_t port, int receive_buffer = 0)
      : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    if (receive_buffer)
      setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    sockaddr_in a = loopback(port);
    connected_ = fd_ >= 0 && connect(fd_, as_sockaddr(&a), sizeof a) == 0;
  }
  ~RawLink() {
    if (fd_ >= 0) close(fd_);
  }
  bool connected() const { return connected_; }
  bool Send(const void* bytes, size_t n) { return write_all(fd_, bytes, n); }
  bool Receive(cm::CmMsg* m) { return read_all(fd_, m, sizeof *m, kTimeout); }
  // True once the peer hung up (reset, or closed with nothing left to read), within the
  // timeout; reads nothing.
  bool HungUp() {
    pollfd p{fd_, POLLRDHUP, 0};
    return poll(&p, 1, static_cast<int>(kTimeout.count())) == 1 &&
           (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }
  // True once the peer closed the connection (EOF), within the timeout.
  bool ClosedByPeer() {
    char byte;
    return wait_readable(fd_, kTimeout) && recv(fd_, &byte, 1, MSG_DONTWAIT) == 0;
  }

 private:
  int fd_;
  bool connected_ = false;
};

cm::CmMsg request(uint32_t conn) {
  cm::CmMsg m = cm::make_msg(cm::MsgType::kReq);
  m.conn = conn;
  m.qpn = 0x123;
  m.retry_count = m.rnr_retry_count = 7;
  return m;
}

// Requests for connections 1 to n.
std::vector<cm::CmMsg> numbered_requests(uint32_t n) {
  std::vector<cm::CmMsg> out;
  for (uint32_t conn = 1; conn <= n; ++conn) out.push_back(request(conn));
  return out;
}

TEST_F(CmLink, ConnectionsToOneListenerShareALinkAndEachEndsOnItsOwn) {
  Pair a, b;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&a));
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&b));
  // One link: both clients' source port is the link's.
  EXPECT_EQ(rdma_get_src_port(a.client), rdma_get_src_port(b.client));
  EXPECT_EQ(rdma_get_dst_port(a.server), rdma_get_dst_port(b.server));

  ASSERT_EQ(rdma_disconnect(a.client), 0) << std::strerror(errno);
  ASSERT_NO_FATAL_FAILURE(ExpectDisconnected({a.client, a.server}));
  EXPECT_EQ(qp_state(a.client->qp), IBV_QPS_ERR);
  EXPECT_EQ(qp_state(b.client->qp), IBV_QPS_RTS);
  EXPECT_EQ(qp_state(b.server->qp), IBV_QPS_RTS);
  Buffer mem = NewBuffer(4096);
  ASSERT_NO_FATAL_FAILURE(ExpectSendArrives(b, mem, 0x5b));
  ASSERT_NO_FATAL_FAILURE(ExpectTimewaitExit({a.client, a.server}));
  EXPECT_TRUE(no_event(ch_));

  ASSERT_EQ(rdma_disconnect(b.server), 0) << std::strerror(errno);
  ASSERT_NO_FATAL_FAILURE(ExpectDisconnected({b.client, b.server}));
}

TEST_F(CmLink, AnIdleLinkCarriesTheNextConnection) {
  Pair a, b;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&a));
  ASSERT_EQ(rdma_disconnect(a.client), 0) << std::strerror(errno);
  ASSERT_NO_FATAL_FAILURE(ExpectDisconnected({a.client, a.server}));
  const uint16_t link_port = rdma_get_src_port(a.client);
  DestroyIdNow(a.client);
  DestroyIdNow(a.server);
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&b));
  EXPECT_EQ(rdma_get_src_port(b.client), link_port);
  Buffer mem = NewBuffer(4096);
  ASSERT_NO_FATAL_FAILURE(ExpectSendArrives(b, mem, 0x6c));
}

TEST_F(CmLink, ARequestOnALinkThatOutlivedItsListenerReachesTheNewOne) {
  Pair a;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&a));  // keeps the link open
  const uint16_t link_port = rdma_get_src_port(a.client);
  DestroyIdNow(listener_);
  listener_ = NewId(ch_);
  ASSERT_NE(listener_, nullptr);
  sockaddr_in addr = loopback(port_);
  ASSERT_EQ(rdma_bind_addr(listener_, as_sockaddr(&addr)), 0) << std::strerror(errno);
  ASSERT_EQ(rdma_listen(listener_, 4), 0) << std::strerror(errno);

  // The request goes on the old link first: refused there (nobody listens behind it), it
  // goes again on a new link, to the new listener.
  Pair b;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&b));
  EXPECT_NE(rdma_get_src_port(b.client), link_port);
  Buffer mem = NewBuffer(4096);
  ASSERT_NO_FATAL_FAILURE(ExpectSendArrives(a, mem, 0x11));
  ASSERT_NO_FATAL_FAILURE(ExpectSendArrives(b, mem, 0x22));
}

TEST_F(CmLink, AMalformedMessageClosesOnlyItsLink) {
  Pair a;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&a));
  RawLink raw(port_);
  ASSERT_TRUE(raw.connected()) << std::strerror(errno);
  std::vector<uint8_t> garbage(sizeof(cm::CmMsg), 0x5a);
  ASSERT_TRUE(raw.Send(garbage.data(), garbage.size()));
  EXPECT_TRUE(raw.ClosedByPeer());
  cm::CmMsg zero_conn = request(0);  // numbers start at 1: 0 names no connection
  RawLink second(port_);
  ASSERT_TRUE(second.connected() && second.Send(&zero_conn, sizeof zero_conn));
  EXPECT_TRUE(second.ClosedByPeer());
  EXPECT_TRUE(no_event(ch_));
  Buffer mem = NewBuffer(4096);
  ASSERT_NO_FATAL_FAILURE(ExpectSendArrives(a, mem, 0x33));
  Pair b;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&b));
}

TEST_F(CmLink, AMessageForAConnectionThatEndedIsIgnoredButADisconnectIsAnswered) {
  RawLink raw(port_);
  ASSERT_TRUE(raw.connected()) << std::strerror(errno);
  const cm::CmMsg req = request(5);
  ASSERT_TRUE(raw.Send(&req, sizeof req));
  std::optional<CmEvent> e = expect_event(ch_, RDMA_CM_EVENT_CONNECT_REQUEST, nullptr);
  ASSERT_TRUE(e);
  ASSERT_EQ(rdma_reject(Own(e->id), nullptr, 0), 0) << std::strerror(errno);
  cm::CmMsg answer{};
  ASSERT_TRUE(raw.Receive(&answer));
  EXPECT_EQ(answer.type, cm::MsgType::kRej);
  EXPECT_EQ(answer.conn, 5u);
  EXPECT_EQ(answer.reject_status, kRejectConsumer);

  // Connection 5 is over here: its RTU changes nothing, its DREQ gets a DREP.
  cm::CmMsg rtu = cm::make_msg(cm::MsgType::kRtu);
  rtu.conn = 5;
  cm::CmMsg dreq = cm::make_msg(cm::MsgType::kDreq);
  dreq.conn = 5;
  ASSERT_TRUE(raw.Send(&rtu, sizeof rtu) && raw.Send(&dreq, sizeof dreq));
  ASSERT_TRUE(raw.Receive(&answer));
  EXPECT_EQ(answer.type, cm::MsgType::kDrep);
  EXPECT_EQ(answer.conn, 5u);
  EXPECT_TRUE(no_event(ch_));

  // The link carries the next request.
  const cm::CmMsg next = request(6);
  ASSERT_TRUE(raw.Send(&next, sizeof next));
  e = expect_event(ch_, RDMA_CM_EVENT_CONNECT_REQUEST, nullptr);
  ASSERT_TRUE(e);
  Own(e->id);
}

TEST_F(CmLink, AnswersToAPeerThatDoesNotReadWaitInTheLinkAndNoneIsLost) {
  RawLink raw(port_, 4096);
  ASSERT_TRUE(raw.connected()) << std::strerror(errno);
  // More answers than the sockets hold: the backlog (16) takes the first requests, the
  // rest are refused at once, while the peer reads nothing.
  constexpr uint32_t kRequests = 3000;
  const std::vector<cm::CmMsg> requests = numbered_requests(kRequests);
  ASSERT_TRUE(raw.Send(requests.data(), requests.size() * sizeof(cm::CmMsg)));
  std::vector<bool> answered(kRequests + 1, false);
  for (uint32_t i = 0; i < kRequests - 16; ++i) {
    cm::CmMsg answer{};
    ASSERT_TRUE(raw.Receive(&answer)) << "answer " << i << " missing";
    ASSERT_EQ(answer.type, cm::MsgType::kRej);
    EXPECT_EQ(answer.reject_status, kRejectConsumer);
    ASSERT_TRUE(answer.conn >= 1 && answer.conn <= kRequests && !answered[answer.conn])
        << "connection " << answer.conn << " answered twice or unknown";
    answered[answer.conn] = true;
  }
  for (int i = 0; i < 16; ++i) {
    std::optional<CmEvent> e = expect_event(ch_, RDMA_CM_EVENT_CONNECT_REQUEST, nullptr);
    ASSERT_TRUE(e);
    Own(e->id);
  }
  EXPECT_TRUE(no_event(ch_));
}

TEST_F(CmLink, APeerThatLeavesTooMuchUnreadIsCutOff) {
  RawLink raw(port_, 4096);
  ASSERT_TRUE(raw.connected()) << std::strerror(errno);
  // About 2 MB of answers: past what a link holds for its peer (1 MiB beside its socket).
  constexpr uint32_t kRequests = 8000;
  const std::vector<cm::CmMsg> requests = numbered_requests(kRequests);
  // The link may be cut before it read every request: a write that fails then is fine.
  raw.Send(requests.data(), requests.size() * sizeof(cm::CmMsg));
  // Nothing is read until the link is cut, so that the answers do pile up.
  ASSERT_TRUE(raw.HungUp()) << "the link held on to the peer's unread answers";
  uint32_t answers = 0;
  for (cm::CmMsg answer{}; raw.Receive(&answer); ++answers)
    ASSERT_EQ(answer.type, cm::MsgType::kRej);
  EXPECT_LT(answers, kRequests - 16);
  // The requests it had taken are dropped with it; the listener goes on.
  for (std::optional<CmEvent> e; (e = try_next_event(ch_, kQuiet));) {
    ASSERT_EQ(e->type, RDMA_CM_EVENT_CONNECT_REQUEST);
    Own(e->id);
  }
  Pair a;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&a));
}

TEST_F(CmLink, EventsAWaiterPostsAndDoesNotTakeKeepTheChannelReadable) {
  RawLink raw(port_);
  ASSERT_TRUE(raw.connected()) << std::strerror(errno);
  ASSERT_FALSE(wait_readable(ch_->fd, Millis{0}));
  CmEvent first;
  std::thread waiter([&] { first = blocking_next_event(ch_); });
  std::this_thread::sleep_for(Millis{50});  // the waiter serves the sockets by now
  const cm::CmMsg two[2] = {request(1), request(2)};
  ASSERT_TRUE(raw.Send(two, sizeof two));  // both arrive at once
  waiter.join();
  ASSERT_EQ(first.type, RDMA_CM_EVENT_CONNECT_REQUEST) << describe(first);
  Own(first.id);
  EXPECT_TRUE(wait_readable(ch_->fd, Millis{0})) << "the second request's event is not signalled";
  std::optional<CmEvent> second = expect_event(ch_, RDMA_CM_EVENT_CONNECT_REQUEST, nullptr);
  ASSERT_TRUE(second);
  Own(second->id);
  EXPECT_NE(first.id, second->id);
  EXPECT_FALSE(wait_readable(ch_->fd, Millis{0}));
}

TEST_F(CmLink, WhatArrivesAfterAWaiterReturnedReachesAnApplicationPollingTheFd) {
  Pair a;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&a));
  // A thread blocked in rdma_get_cm_event serves the client's DREQ and returns; the DREP
  // that ends the server's side may come after it did, when nobody waits in the call: the
  // CM thread takes the sockets back and serves it.
  CmEvent first;
  std::thread waiter([&] { first = blocking_next_event(ch_); });
  std::this_thread::sleep_for(Millis{50});
  ASSERT_EQ(rdma_disconnect(a.client), 0) << std::strerror(errno);
  waiter.join();
  ASSERT_EQ(first.type, RDMA_CM_EVENT_DISCONNECTED) << describe(first);
  rdma_cm_id* other = first.id == a.client ? a.server : a.client;
  ASSERT_TRUE(wait_readable(ch_->fd, kTimeout)) << "the second DISCONNECTED was never signalled";
  ASSERT_NO_FATAL_FAILURE(ExpectDisconnected({other}));
}

}  // namespace
}  // namespace softrdma_test

// The connection manager (librdmacm) on softrdma: the asynchronous connection flow on one
// event channel, and its failure events — no listener, no route, rejection with private
// data, a peer that disconnects, a peer that is destroyed or dies — plus UD (SIDR) and the
// small calls (devices, event names, options, what is not supported).
//
// "Peer dies" and "no route" run a child: this program again (fork + exec, so the child
// starts without the parent's CM state), in a role given on its command line. A child runs
// plain code (no gtest), reports through a pipe, is bounded by alarm(), and is reaped.
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/limits.h>
#include <net/if.h>
#include <rdma/rsocket.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>

#include <cstdlib>

#include "cm_fixture.hpp"
#include "fork_child.hpp"

namespace softrdma_test {
namespace {

// ---------------------------------------------------------------------------------------------
// Children.

constexpr const char* kChildFlag = "--cm-child";
// Longer than fork_child.hpp's: these children set up network namespaces first.
constexpr unsigned kExecChildAlarmSeconds = 15;
/// The address timeout the "no route" child passes to rdma_resolve_addr.
constexpr int kUnroutableTimeoutMs = 500;

/// What a child tells its parent (one or more of these, in order).
struct Report {
  int32_t ok = 0;         // 1: the step succeeded
  int32_t setup_err = 0;  // errno of the environment set-up (unshare)
  int32_t rc = 0;         // return value of the call under test
  int32_t event = -1;     // the event it got (-1: none)
  int32_t status = 0;     // that event's status
  int32_t retry_event = -1;
  int64_t elapsed_ms = 0;               // from the call to its event
  uint32_t qpn = 0;                     // the child's QP
  uint32_t sources[2] = {};             // addresses a resolve found (network order)
  int32_t plain_connect_to_itself = 0;  // the self-connect child's premise held
};

/// This program, started again as a child in `role`; always reaped (ReapedChild).
class ChildProcess : public ReapedChild {
 public:
  ChildProcess() = default;
  ~ChildProcess() {
    if (in_ >= 0) close(in_);
  }

  bool Start(const std::string& role, uint16_t port) {
    char exe[PATH_MAX] = {};
    if (readlink("/proc/self/exe", exe, sizeof exe - 1) <= 0) return false;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return false;
    std::string flag = kChildFlag, role_arg = role, fd_arg = std::to_string(fds[1]),
                port_arg = std::to_string(port);
    char* argv[] = {exe, flag.data(), role_arg.data(), fd_arg.data(), port_arg.data(), nullptr};
    std::fflush(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      alarm(kExecChildAlarmSeconds);  // survives exec: the child cannot outlive its bound
      fcntl(fds[1], F_SETFD, 0);      // the report pipe survives exec
      execv(exe, argv);
      _exit(127);
    }
    close(fds[1]);
    in_ = fds[0];
    return pid_ > 0;
  }

  bool Receive(Report* r, Millis timeout = kTimeout) {
    return read_all(in_, r, sizeof *r, timeout);
  }

 private:
  int in_ = -1;
};

/// Runs a child in `role` to the end, its report in `r`. Use as
/// ASSERT_NO_FATAL_FAILURE(RunChild(...)).
void RunChild(const char* role, uint16_t port, Millis timeout, Report& r) {
  ChildProcess child;
  ASSERT_TRUE(child.Start(role, port));
  ASSERT_TRUE(child.Receive(&r, timeout)) << "no report";
  EXPECT_EQ(child.Wait(), 0);
}

/// Why a child that needs a network namespace of its own could not have one.
std::string no_namespace(const Report& r) {
  return std::string("cannot make a network namespace: unshare(CLONE_NEWNET): ") +
         std::strerror(r.setup_err);
}

int child_fail(int fd, Report r, const char* what) {
  std::fprintf(stderr, "cm child: %s (errno %d: %s)\n", what, errno, std::strerror(errno));
  r.ok = 0;
  write_all(fd, &r, sizeof r);
  return 1;
}

/// Waits for the next event of `ch`, which must be `type`; fills r.event / r.status.
bool child_expect(rdma_event_channel* ch, rdma_cm_event_type type, Report& r,
                  Millis timeout = kTimeout) {
  std::optional<CmEvent> e = try_next_event(ch, timeout);
  r.event = e ? static_cast<int32_t>(e->type) : -1;
  r.status = e ? e->status : 0;
  return e && e->type == type;
}

ibv_qp_init_attr child_qp_attr() {
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = 8;
  attr.cap.max_recv_wr = 8;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  return attr;
}

/// A new id on `ch` with its address and route resolved towards 127.0.0.1:port and a QP
/// (the CM's PD and CQs): ready for rdma_connect. Returns the step that failed, or null.
const char* child_id_to_connect(rdma_event_channel* ch, uint16_t port, Report& r,
                                rdma_cm_id** out) {
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) return "create id";
  sockaddr_in dst = loopback(port);
  if (rdma_resolve_addr(id, nullptr, as_sockaddr(&dst), kResolveTimeoutMs) != 0 ||
      !child_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, r))
    return "resolve address";
  if (rdma_resolve_route(id, kResolveTimeoutMs) != 0 ||
      !child_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, r))
    return "resolve route";
  ibv_qp_init_attr attr = child_qp_attr();
  if (rdma_create_qp(id, nullptr, &attr) != 0) return "rdma_create_qp";
  *out = id;
  return nullptr;
}

/// Makes `count` connections to 127.0.0.1:port, one after the other (QP and CQs made by the
/// CM), reports each, then waits to be killed.
int child_client(int fd, uint16_t port, int count) {
  Report r;
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) return child_fail(fd, r, "create channel");
  for (int i = 0; i < count; ++i) {
    r = Report{};
    rdma_cm_id* id = nullptr;
    if (const char* failed = child_id_to_connect(ch, port, r, &id))
      return child_fail(fd, r, failed);
    if (rdma_connect(id, nullptr) != 0 || !child_expect(ch, RDMA_CM_EVENT_ESTABLISHED, r))
      return child_fail(fd, r, "connect");
    r.ok = 1;
    r.qpn = id->qp->qp_num;
    write_all(fd, &r, sizeof r);
  }
  for (;;) pause();  // until SIGKILL (or the alarm)
}

/// Listens on 127.0.0.1:port, reports, accepts one connection, reports, waits to be killed.
int child_server(int fd, uint16_t port) {
  Report r;
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* listener = nullptr;
  if (!ch || rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP) != 0)
    return child_fail(fd, r, "create id");
  sockaddr_in addr = loopback(port);
  if (rdma_bind_addr(listener, as_sockaddr(&addr)) != 0 || rdma_listen(listener, 4) != 0)
    return child_fail(fd, r, "listen");
  r.ok = 1;
  write_all(fd, &r, sizeof r);  // listening
  r = Report{};
  std::optional<CmEvent> req = try_next_event(ch, kTimeout);
  if (!req || req->type != RDMA_CM_EVENT_CONNECT_REQUEST) return child_fail(fd, r, "request");
  ibv_qp_init_attr attr = child_qp_attr();
  if (rdma_create_qp(req->id, nullptr, &attr) != 0) return child_fail(fd, r, "rdma_create_qp");
  if (rdma_accept(req->id, nullptr) != 0 || !child_expect(ch, RDMA_CM_EVENT_ESTABLISHED, r))
    return child_fail(fd, r, "accept");
  r.ok = 1;
  r.qpn = req->id->qp->qp_num;
  write_all(fd, &r, sizeof r);  // established
  for (;;) pause();
}

/// Moves this child into a network namespace of its own, with lo up. If it cannot, it has
/// sent its report (setup_err when there is no namespace to be had) and returns false.
bool own_network_namespace(int fd, Report& r) {
  if (unshare(CLONE_NEWNET) != 0) {
    r.setup_err = errno;
    write_all(fd, &r, sizeof r);
    return false;
  }
  const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  bool up = s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0;
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
  up = up && ioctl(s, SIOCSIFFLAGS, &ifr) == 0;
  if (s >= 0) close(s);
  if (!up) child_fail(fd, r, "set lo up");
  return up;
}

/// In a network namespace of its own: resolves an address that has no route, then
/// 127.0.0.1 on the same id.
int child_unroutable(int fd) {
  Report r;
  if (!own_network_namespace(fd, r)) return 0;
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  if (!ch || rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0)
    return child_fail(fd, r, "create id");
  sockaddr_in dst = loopback(4791);
  dst.sin_addr.s_addr = htonl(0xc6336401);  // 198.51.100.1 (TEST-NET-2): no route here
  const auto start = Clock::now();
  r.rc = rdma_resolve_addr(id, nullptr, as_sockaddr(&dst), kUnroutableTimeoutMs);
  child_expect(ch, RDMA_CM_EVENT_ADDR_ERROR, r, Millis{kUnroutableTimeoutMs + 4000});
  r.elapsed_ms = std::chrono::duration_cast<Millis>(Clock::now() - start).count();
  // The id may try again, towards an address that is reachable.
  sockaddr_in lo = loopback(4791);
  if (rdma_resolve_addr(id, nullptr, as_sockaddr(&lo), kResolveTimeoutMs) == 0) {
    std::optional<CmEvent> e = try_next_event(ch, kTimeout);
    r.retry_event = e ? static_cast<int32_t>(e->type) : -1;
  }
  r.ok = 1;
  write_all(fd, &r, sizeof r);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
  return 0;
}

/// In a network namespace of its own whose only local port is `port`, where nobody listens:
/// a plain connect() to 127.0.0.1:port connects its socket to itself, and so does every
/// connect() the CM makes for an rdma_connect there.
int child_self_connect(int fd, uint16_t port) {
  Report r;
  if (!own_network_namespace(fd, r)) return 0;
  const std::string range = std::to_string(port) + " " + std::to_string(port);
  const int sysctl = open("/proc/sys/net/ipv4/ip_local_port_range", O_WRONLY | O_CLOEXEC);
  const bool set = sysctl >= 0 &&
                   write(sysctl, range.data(), range.size()) == static_cast<ssize_t>(range.size());
  if (sysctl >= 0) close(sysctl);
  if (!set) return child_fail(fd, r, "ip_local_port_range");
  sockaddr_in dst = loopback(port);
  const int plain = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (plain >= 0 && connect(plain, as_sockaddr(&dst), sizeof dst) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    getsockname(plain, as_sockaddr(&local), &len);
    r.plain_connect_to_itself = local.sin_port == dst.sin_port;
  }
  if (plain >= 0) {
    const linger reset{1, 0};  // no TIME_WAIT holding the only port
    setsockopt(plain, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    close(plain);
  }

  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) return child_fail(fd, r, "create channel");
  rdma_cm_id* id = nullptr;
  if (const char* failed = child_id_to_connect(ch, port, r, &id)) return child_fail(fd, r, failed);
  const auto start = Clock::now();
  r.rc = rdma_connect(id, nullptr);
  child_expect(ch, RDMA_CM_EVENT_REJECTED, r);
  r.elapsed_ms = std::chrono::duration_cast<Millis>(Clock::now() - start).count();
  r.ok = 1;
  write_all(fd, &r, sizeof r);
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Fixtures.

using CmFlow = CmTest;
using CmFailure = CmConnTest;
using CmDisconnect = CmConnTest;
using CmUd = CmTest;
using CmMisc = CmTest;

// ---------------------------------------------------------------------------------------------
// 1. The asynchronous flow, server and client on one channel, driven by an event loop.

/// What the server's accept tells the client: where to RDMA WRITE.
struct WriteTarget {
  uint64_t addr;
  uint32_t rkey;
  uint32_t length;
};

TEST_F(CmFlow, AsyncConnectOnOneChannelThenSendAndWrite) {
  rdma_event_channel* ch = NewChannel();
  ASSERT_NE(ch, nullptr);
  uint16_t port = 0;
  int listener_tag = 0;
  rdma_cm_id* listener = Listen(ch, &port);
  ASSERT_NE(listener, nullptr);
  listener->context = &listener_tag;
  int client_tag = 0;
  rdma_cm_id* client = NewId(ch, RDMA_PS_TCP, &client_tag);
  ibv_cq* client_cq = NewCq();
  ibv_cq* server_cq = NewCq();
  ASSERT_TRUE(client && client_cq && server_cq);
  EXPECT_EQ(client->channel, ch);
  EXPECT_EQ(client->ps, RDMA_PS_TCP);
  EXPECT_EQ(client->qp_type, IBV_QPT_RC);

  constexpr uint32_t kWriteLength = 1024, kSendLength = 64;
  Buffer server_mem = NewBuffer(4096, 0x00);
  Buffer client_mem = NewBuffer(4096, 0xab);
  const std::vector<uint8_t> request_data = pattern(56, 0x10);  // the most a REQ carries
  WriteTarget target{server_mem.addr(), server_mem.rkey(), kWriteLength};
  std::vector<uint8_t> accept_data(sizeof target + 100);
  std::memcpy(accept_data.data(), &target, sizeof target);
  const std::vector<uint8_t> tail = pattern(100, 0x70);
  std::copy(tail.begin(), tail.end(), accept_data.begin() + sizeof target);

  sockaddr_in dst = loopback(port);
  ASSERT_EQ(rdma_resolve_addr(client, nullptr, as_sockaddr(&dst), kResolveTimeoutMs), 0)
      << std::strerror(errno);

  rdma_cm_id* server = nullptr;
  bool client_established = false, server_established = false;
  std::vector<uint8_t> accepted;  // the private data of the client's ESTABLISHED
  std::vector<rdma_cm_event_type> client_events;
  while (!(client_established && server_established)) {
    std::optional<CmEvent> e = next_event(ch);
    ASSERT_TRUE(e);
    SCOPED_TRACE(describe(*e));
    ASSERT_EQ(e->status, 0);
    if (e->id == client) client_events.push_back(e->type);
    switch (e->type) {
      case RDMA_CM_EVENT_ADDR_RESOLVED:
        ASSERT_EQ(e->id, client);
        EXPECT_EQ(e->id->context, &client_tag);
        EXPECT_EQ(client->verbs, ctx()) << "the device that reaches the address";
        ASSERT_EQ(rdma_resolve_route(client, kResolveTimeoutMs), 0) << std::strerror(errno);
        break;
      case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        ASSERT_EQ(e->id, client);
        ASSERT_NE(CreateQp(client, client_cq), nullptr);
        EXPECT_EQ(qp_state(client->qp), IBV_QPS_INIT);
        rdma_conn_param param = conn_param(request_data);
        ASSERT_EQ(rdma_connect(client, &param), 0) << std::strerror(errno);
        break;
      }
      case RDMA_CM_EVENT_CONNECT_REQUEST: {
        ASSERT_EQ(server, nullptr) << "a second request";
        EXPECT_EQ(e->listen_id, listener);
        ASSERT_NE(e->id, nullptr);
        ASSERT_NE(e->id, listener);
        ASSERT_NE(e->id, client);
        server = Own(e->id);
        EXPECT_EQ(server->channel, ch) << "a new id reports on its listener's channel";
        EXPECT_EQ(server->context, &listener_tag) << "a new id inherits the listener's context";
        EXPECT_EQ(server->verbs, ctx());
        EXPECT_EQ(server->ps, RDMA_PS_TCP);
        EXPECT_TRUE(starts_with(e->private_data, request_data));
        EXPECT_EQ(e->conn.qp_num, client->qp->qp_num);
        // Addresses: the new id's peer is the client's local address and vice versa.
        const auto* peer = reinterpret_cast<const sockaddr_in*>(rdma_get_peer_addr(server));
        EXPECT_EQ(peer->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
        EXPECT_EQ(rdma_get_src_port(server), htons(port));
        EXPECT_EQ(rdma_get_dst_port(server), rdma_get_src_port(client));
        ASSERT_NE(CreateQp(server, server_cq), nullptr);
        EXPECT_EQ(qp_state(server->qp), IBV_QPS_INIT);
        ASSERT_EQ(post_recv(server->qp, 100, {server_mem.sge(2048, kSendLength)}), 0);
        rdma_conn_param param = conn_param(accept_data);
        ASSERT_EQ(rdma_accept(server, &param), 0) << std::strerror(errno);
        break;
      }
      case RDMA_CM_EVENT_ESTABLISHED:
        if (e->id == client) {
          ASSERT_FALSE(client_established);
          client_established = true;
          accepted = e->private_data;
          ASSERT_NE(server, nullptr);
          EXPECT_EQ(e->conn.qp_num, server->qp->qp_num);
        } else {
          ASSERT_EQ(e->id, server);
          ASSERT_FALSE(server_established);
          server_established = true;
        }
        break;
      default:
        FAIL() << "unexpected event";
    }
  }
  EXPECT_EQ(client_events, (std::vector<rdma_cm_event_type>{RDMA_CM_EVENT_ADDR_RESOLVED,
                                                            RDMA_CM_EVENT_ROUTE_RESOLVED,
                                                            RDMA_CM_EVENT_ESTABLISHED}));
  ASSERT_TRUE(starts_with(accepted, accept_data));
  EXPECT_EQ(rdma_get_dst_port(client), htons(port));
  EXPECT_EQ(qp_state(client->qp), IBV_QPS_RTS);
  EXPECT_EQ(qp_state(server->qp), IBV_QPS_RTS);

  // The QPs point at each other.
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(client->qp, &attr, IBV_QP_DEST_QPN, &init), 0);
  EXPECT_EQ(attr.dest_qp_num, server->qp->qp_num);
  ASSERT_EQ(ibv_query_qp(server->qp, &attr, IBV_QP_DEST_QPN, &init), 0);
  EXPECT_EQ(attr.dest_qp_num, client->qp->qp_num);

  // An RDMA WRITE where the accept said, then a SEND (ordered after it on the wire).
  WriteTarget got{};
  std::memcpy(&got, accepted.data(), sizeof got);
  ASSERT_EQ(got.addr, target.addr);
  ASSERT_EQ(got.rkey, target.rkey);
  ASSERT_EQ(post_send(client->qp, rdma_wr(1, IBV_WR_RDMA_WRITE, got.addr, got.rkey),
                      {client_mem.sge(0, got.length)}),
            0);
  std::memset(client_mem.data() + 3000, 0x5c, kSendLength);
  ASSERT_EQ(post_send(client->qp, send_wr(2), {client_mem.sge(3000, kSendLength)}), 0);
  const std::vector<ibv_wc> sent = poll_n(client_cq, 2);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_TRUE(completed(sent[0], 1));
  EXPECT_EQ(sent[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_TRUE(completed(sent[1], 2));
  EXPECT_EQ(sent[1].opcode, IBV_WC_SEND);
  const ibv_wc recv = poll_one(server_cq);
  EXPECT_TRUE(completed(recv, 100));
  EXPECT_EQ(recv.opcode, IBV_WC_RECV);
  EXPECT_EQ(recv.byte_len, kSendLength);
  EXPECT_EQ(recv.qp_num, server->qp->qp_num);
  EXPECT_EQ(recv.src_qp, client->qp->qp_num);
  EXPECT_TRUE(server_mem.all(0xab, 0, kWriteLength)) << "the RDMA WRITE did not land";
  EXPECT_TRUE(server_mem.all(0x00, kWriteLength, 1024)) << "the RDMA WRITE went too far";
  EXPECT_TRUE(server_mem.all(0x5c, 2048, kSendLength)) << "the SEND did not land";
  EXPECT_TRUE(no_event(ch));
}

// ---------------------------------------------------------------------------------------------
// 2-4. Connections that do not happen.

TEST_F(CmFailure, ConnectWithoutListenerIsRejectedInvalidServiceId) {
  const uint16_t port = free_port();  // nobody listens there
  ASSERT_NE(port, 0);
  rdma_cm_id* client = nullptr;
  ASSERT_NO_FATAL_FAILURE(ConnectTo(port, pattern(20, 1), &client));
  std::optional<CmEvent> e =
      expect_event(ch_, RDMA_CM_EVENT_REJECTED, client, kRejectInvalidServiceId);
  ASSERT_TRUE(e);
  EXPECT_NE(e->status, 0);
  EXPECT_TRUE(no_event(ch_)) << "the listener on another port heard nothing";
}

// A server that replaces its listener (perftest -R does between its two connections) may
// listen again a little after the client connects: the request waits for it, unrefused.
TEST_F(CmFailure, AListenerThatComesSoonAfterTheRequestStillGetsIt) {
  const uint16_t port = free_port();
  ASSERT_NE(port, 0);
  const std::vector<uint8_t> data = pattern(20, 3);
  rdma_cm_id* client = nullptr;
  ASSERT_NO_FATAL_FAILURE(ConnectTo(port, data, &client));
  EXPECT_TRUE(no_event(ch_, Millis{1000})) << "refused before the listener came";

  rdma_cm_id* late = NewId(ch_);
  ASSERT_NE(late, nullptr);
  sockaddr_in addr = loopback(port);
  ASSERT_EQ(rdma_bind_addr(late, as_sockaddr(&addr)), 0) << std::strerror(errno);
  ASSERT_EQ(rdma_listen(late, 4), 0) << std::strerror(errno);
  std::optional<CmEvent> request = expect_event(ch_, RDMA_CM_EVENT_CONNECT_REQUEST, nullptr);
  ASSERT_TRUE(request);
  EXPECT_EQ(request->listen_id, late);
  EXPECT_TRUE(starts_with(request->private_data, data));
  ASSERT_EQ(rdma_reject(Own(request->id), nullptr, 0), 0) << std::strerror(errno);
  EXPECT_TRUE(expect_event(ch_, RDMA_CM_EVENT_REJECTED, client, kRejectConsumer));
}

TEST_F(CmFailure, RejectCarriesPrivateDataAndConsumerStatus) {
  rdma_cm_id* client = NewId(ch_);
  ibv_cq* cq = NewCq();
  ASSERT_TRUE(client && cq);
  ASSERT_NO_FATAL_FAILURE(Resolve(ch_, client, port_));
  ASSERT_NE(CreateQp(client, cq), nullptr);
  const std::vector<uint8_t> request = pattern(8, 0x21);
  rdma_conn_param param = conn_param(request);
  ASSERT_EQ(rdma_connect(client, &param), 0) << std::strerror(errno);
  std::optional<CmEvent> req = expect_event(ch_, RDMA_CM_EVENT_CONNECT_REQUEST, nullptr);
  ASSERT_TRUE(req);
  rdma_cm_id* server = Own(req->id);
  EXPECT_TRUE(starts_with(req->private_data, request));

  const std::vector<uint8_t> reason = pattern(148, 0x90);  // the most a REJ carries
  ASSERT_EQ(rdma_reject(server, reason.data(), static_cast<uint8_t>(reason.size())), 0)
      << std::strerror(errno);
  std::optional<CmEvent> e = expect_event(ch_, RDMA_CM_EVENT_REJECTED, client, kRejectConsumer);
  ASSERT_TRUE(e);
  EXPECT_TRUE(starts_with(e->private_data, reason));
  EXPECT_TRUE(no_event(ch_)) << "the rejecting side gets no event";
  // The request is answered: neither accept nor a second reject is possible.
  EXPECT_NE(rdma_accept(server, nullptr), 0);
}

TEST_F(CmFailure, RejectedConnectionPutsTheQpInError) {
  // librdmacm moves the QP of a rejected connection to ERROR: receives posted before the
  // connect are flushed.
  rdma_cm_id* client = NewId(ch_);
  ibv_cq* cq = NewCq();
  ASSERT_TRUE(client && cq);
  ASSERT_NO_FATAL_FAILURE(Resolve(ch_, client, port_));
  ASSERT_NE(CreateQp(client, cq), nullptr);
  Buffer mem = NewBuffer(256);
  ASSERT_EQ(post_recv(client->qp, 5, {mem.sge(0, 256)}), 0);
  ASSERT_EQ(rdma_connect(client, nullptr), 0) << std::strerror(errno);
  std::optional<CmEvent> req = expect_event(ch_, RDMA_CM_EVENT_CONNECT_REQUEST, nullptr);
  ASSERT_TRUE(req);
  ASSERT_EQ(rdma_reject(Own(req->id), nullptr, 0), 0);
  ASSERT_TRUE(expect_event(ch_, RDMA_CM_EVENT_REJECTED, client, kRejectConsumer));
  EXPECT_EQ(qp_state(client->qp), IBV_QPS_ERR);
  EXPECT_TRUE(completed(poll_one(cq), 5, IBV_WC_WR_FLUSH_ERR));
}

TEST_F(CmFailure, DestroyingAnUnansweredRequestRejectsIt) {
  // The IB CM answers a request whose id is destroyed unanswered with a consumer reject.
  rdma_cm_id* client = NewId(ch_);
  ASSERT_NE(client, nullptr);
  ASSERT_NO_FATAL_FAILURE(Resolve(ch_, client, port_));
  ASSERT_EQ(rdma_connect(client, nullptr), 0) << std::strerror(errno);
  std::optional<CmEvent> req = expect_event(ch_, RDMA_CM_EVENT_CONNECT_REQUEST, nullptr);
  ASSERT_TRUE(req);
  DestroyIdNow(Own(req->id));
  std::optional<CmEvent> e = next_event(ch_);
  ASSERT_TRUE(e);
  ASSERT_EQ(e->id, client);
  EXPECT_EQ(e->type, RDMA_CM_EVENT_REJECTED) << describe(*e);
  EXPECT_EQ(e->status, kRejectConsumer);
}

TEST_F(CmFailure, NewIdOutlivesItsListener) {
  rdma_cm_id* client = NewId(ch_);
  ibv_cq* cq = NewCq();
  ASSERT_TRUE(client && cq);
  ASSERT_NO_FATAL_FAILURE(Resolve(ch_, client, port_));
  ASSERT_NE(CreateQp(client, cq), nullptr);
  ASSERT_EQ(rdma_connect(client, nullptr), 0) << std::strerror(errno);
  std::optional<CmEvent> req = expect_event(ch_, RDMA_CM_EVENT_CONNECT_REQUEST, nullptr);
  ASSERT_TRUE(req);
  rdma_cm_id* server = Own(req->id);
  DestroyIdNow(listener_);  // the new id stays usable
  listener_ = nullptr;
  ASSERT_NE(CreateQp(server, cq), nullptr);
  ASSERT_EQ(rdma_accept(server, nullptr), 0) << std::strerror(errno);
  std::vector<rdma_cm_id*> waiting = {client, server};
  for (int i = 0; i < 2; ++i) {
    std::optional<CmEvent> e = next_event(ch_);
    ASSERT_TRUE(e);
    ASSERT_EQ(e->type, RDMA_CM_EVENT_ESTABLISHED) << describe(*e);
    auto it = std::find(waiting.begin(), waiting.end(), e->id);
    ASSERT_NE(it, waiting.end());
    waiting.erase(it);
  }
}

// ---------------------------------------------------------------------------------------------
// 5. Disconnects: DISCONNECTED on both sides, the QPs in ERROR, receives flushed, then
// TIMEWAIT_EXIT on the ids that keep their QPs.

void PostOneRecv(ibv_qp* qp, const Buffer& mem, uint64_t wr_id) {
  ASSERT_EQ(post_recv(qp, wr_id, {mem.sge(0, 128)}), 0);
}

TEST_F(CmDisconnect, ClientDisconnectsBothSidesFlushThenTimewaitExit) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&p));
  Buffer mem = NewBuffer(4096);
  ASSERT_NO_FATAL_FAILURE(PostOneRecv(p.server->qp, mem, 11));
  ASSERT_NO_FATAL_FAILURE(PostOneRecv(p.client->qp, mem, 12));
  ASSERT_EQ(rdma_disconnect(p.client), 0) << std::strerror(errno);
  ASSERT_NO_FATAL_FAILURE(ExpectDisconnected({p.client, p.server}));
  EXPECT_EQ(qp_state(p.server->qp), IBV_QPS_ERR) << "the survivor's QP";
  EXPECT_EQ(qp_state(p.client->qp), IBV_QPS_ERR);
  EXPECT_TRUE(completed(poll_one(p.server_cq), 11, IBV_WC_WR_FLUSH_ERR));
  EXPECT_TRUE(completed(poll_one(p.client_cq), 12, IBV_WC_WR_FLUSH_ERR));
  // Sending on the disconnected QP completes in error, never on the wire.
  EXPECT_EQ(post_send(p.server->qp, send_wr(13), {mem.sge(0, 16)}), 0);
  EXPECT_TRUE(completed(poll_one(p.server_cq), 13, IBV_WC_WR_FLUSH_ERR));
  ASSERT_NO_FATAL_FAILURE(ExpectTimewaitExit({p.client, p.server}));
  EXPECT_TRUE(no_event(ch_));
}

TEST_F(CmDisconnect, ServerDisconnectsBothSidesFlushThenTimewaitExit) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&p));
  Buffer mem = NewBuffer(4096);
  ASSERT_NO_FATAL_FAILURE(PostOneRecv(p.client->qp, mem, 21));
  ASSERT_EQ(rdma_disconnect(p.server), 0) << std::strerror(errno);
  ASSERT_NO_FATAL_FAILURE(ExpectDisconnected({p.client, p.server}));
  EXPECT_EQ(qp_state(p.client->qp), IBV_QPS_ERR) << "the survivor's QP";
  EXPECT_EQ(qp_state(p.server->qp), IBV_QPS_ERR);
  EXPECT_TRUE(completed(poll_one(p.client_cq), 21, IBV_WC_WR_FLUSH_ERR));
  // A second disconnect of either side changes nothing.
  EXPECT_EQ(rdma_disconnect(p.client), 0);
  ASSERT_NO_FATAL_FAILURE(ExpectTimewaitExit({p.client, p.server}));
  EXPECT_TRUE(no_event(ch_));
}

TEST_F(CmDisconnect, BothSidesDisconnectAtOnce) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&p));
  ASSERT_EQ(rdma_disconnect(p.client), 0) << std::strerror(errno);
  ASSERT_EQ(rdma_disconnect(p.server), 0) << std::strerror(errno);
  ASSERT_NO_FATAL_FAILURE(ExpectDisconnected({p.client, p.server}));
  ASSERT_NO_FATAL_FAILURE(ExpectTimewaitExit({p.client, p.server}));
  EXPECT_TRUE(no_event(ch_));
}

TEST_F(CmDisconnect, DestroyingAConnectedIdDisconnectsThePeer) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&p));
  Buffer mem = NewBuffer(4096);
  ASSERT_NO_FATAL_FAILURE(PostOneRecv(p.server->qp, mem, 31));
  DestroyIdNow(p.client);  // QP first, then the id, without rdma_disconnect
  ASSERT_NO_FATAL_FAILURE(ExpectDisconnected({p.server}));
  EXPECT_EQ(qp_state(p.server->qp), IBV_QPS_ERR);
  EXPECT_TRUE(completed(poll_one(p.server_cq), 31, IBV_WC_WR_FLUSH_ERR));
  ASSERT_NO_FATAL_FAILURE(ExpectTimewaitExit({p.server}));
  EXPECT_TRUE(no_event(ch_));
}

// ---------------------------------------------------------------------------------------------
// 3 and 6: children.

TEST_F(CmFailure, UnroutableAddressIsAddrErrorAfterTheTimeout) {
  Report r;
  ASSERT_NO_FATAL_FAILURE(RunChild("unroutable", 0, Millis{kUnroutableTimeoutMs + 8000}, r));
  if (r.setup_err) GTEST_SKIP() << no_namespace(r);
  ASSERT_EQ(r.ok, 1);
  EXPECT_EQ(r.rc, 0) << "the failure is an event, not the call's result";
  ASSERT_EQ(r.event, RDMA_CM_EVENT_ADDR_ERROR)
      << (r.event >= 0 ? rdma_event_str(static_cast<rdma_cm_event_type>(r.event)) : "none");
  EXPECT_EQ(r.status, -ENETUNREACH);
  EXPECT_GE(r.elapsed_ms, kUnroutableTimeoutMs) << "ADDR_ERROR came before the timeout";
  EXPECT_LT(r.elapsed_ms, kUnroutableTimeoutMs + 1500) << "ADDR_ERROR came late";
  EXPECT_EQ(r.retry_event, RDMA_CM_EVENT_ADDR_RESOLVED) << "the id resolves again afterwards";
}

// A connect() to a port of this host where nobody listens can connect the socket to itself
// (the kernel may pick that port as the source). The child's namespace has no other port to
// pick, so each of the CM's attempts does: the connection is still refused as unlistened.
TEST_F(CmFailure, AConnectionToItselfIsRefusedAsNobodyListens) {
  constexpr uint16_t kOnlyPort = 40000;  // in the child's own namespace
  Report r;
  ASSERT_NO_FATAL_FAILURE(RunChild("self_connect", kOnlyPort, Millis{12000}, r));
  if (r.setup_err) GTEST_SKIP() << no_namespace(r);
  ASSERT_EQ(r.ok, 1);
  ASSERT_EQ(r.plain_connect_to_itself, 1) << "the premise: a plain connect() meets itself";
  EXPECT_EQ(r.rc, 0) << "the refusal is an event, not the call's result";
  ASSERT_EQ(r.event, RDMA_CM_EVENT_REJECTED)
      << (r.event >= 0 ? rdma_event_str(static_cast<rdma_cm_event_type>(r.event)) : "none");
  EXPECT_EQ(r.status, kRejectInvalidServiceId);
  EXPECT_LT(r.elapsed_ms, 4000) << "refused only after the grace for a late listener (2 s)";
}

/// A listener with a channel and a CQ of its own, and a child started against it in `role`.
class CmPeerDeath : public CmTest {
 protected:
  void ListenForChild(const char* role, ChildProcess& child) {
    ch_ = NewChannel();
    ASSERT_NE(ch_, nullptr);
    uint16_t port = 0;
    ASSERT_NE(Listen(ch_, &port), nullptr);
    cq_ = NewCq();
    ASSERT_NE(cq_, nullptr);
    ASSERT_TRUE(child.Start(role, port));
  }

  rdma_event_channel* ch_ = nullptr;
  ibv_cq* cq_ = nullptr;
};

TEST_F(CmPeerDeath, ClientKilledServerSeesDisconnectAndFlush) {
  ChildProcess child;
  ASSERT_NO_FATAL_FAILURE(ListenForChild("client", child));
  rdma_event_channel* ch = ch_;
  ibv_cq* cq = cq_;
  std::optional<CmEvent> req = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, nullptr);
  ASSERT_TRUE(req);
  rdma_cm_id* server = Own(req->id);
  ASSERT_NE(CreateQp(server, cq), nullptr);
  Buffer mem = NewBuffer(4096);
  ASSERT_EQ(post_recv(server->qp, 41, {mem.sge(0, 256)}), 0);
  ASSERT_EQ(rdma_accept(server, nullptr), 0) << std::strerror(errno);
  ASSERT_TRUE(expect_event(ch, RDMA_CM_EVENT_ESTABLISHED, server));
  Report r;
  ASSERT_TRUE(child.Receive(&r)) << "the child did not connect";
  ASSERT_EQ(r.ok, 1);
  EXPECT_EQ(r.qpn, req->conn.qp_num);
  EXPECT_EQ(qp_state(server->qp), IBV_QPS_RTS);

  const int status = child.Kill();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ASSERT_TRUE(expect_event(ch, RDMA_CM_EVENT_DISCONNECTED, server));
  EXPECT_EQ(qp_state(server->qp), IBV_QPS_ERR);
  EXPECT_TRUE(completed(poll_one(cq), 41, IBV_WC_WR_FLUSH_ERR));
  ASSERT_TRUE(expect_event(ch, RDMA_CM_EVENT_TIMEWAIT_EXIT, server, 0, Millis{3000}));
  EXPECT_TRUE(no_event(ch));
}

TEST_F(CmPeerDeath, APeerThatDiesEndsEveryConnectionOfItsLink) {
  ChildProcess child;
  ASSERT_NO_FATAL_FAILURE(ListenForChild("two_clients", child));
  rdma_event_channel* ch = ch_;
  ibv_cq* cq = cq_;
  Buffer mem = NewBuffer(4096);
  rdma_cm_id* servers[2] = {};
  for (int i = 0; i < 2; ++i) {
    std::optional<CmEvent> req = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, nullptr);
    ASSERT_TRUE(req);
    servers[i] = Own(req->id);
    ASSERT_NE(CreateQp(servers[i], cq), nullptr);
    ASSERT_EQ(post_recv(servers[i]->qp, 60 + i, {mem.sge(256 * i, 256)}), 0);
    ASSERT_EQ(rdma_accept(servers[i], nullptr), 0) << std::strerror(errno);
    ASSERT_TRUE(expect_event(ch, RDMA_CM_EVENT_ESTABLISHED, servers[i]));
    Report r;
    ASSERT_TRUE(child.Receive(&r)) << "the child did not connect";
    ASSERT_EQ(r.ok, 1);
  }
  // Both came over one link (the child's source port is the link's).
  EXPECT_EQ(rdma_get_dst_port(servers[0]), rdma_get_dst_port(servers[1]));

  child.Kill();
  std::vector<rdma_cm_id*> left = {servers[0], servers[1]};
  while (!left.empty()) {
    std::optional<CmEvent> e = next_event(ch);
    ASSERT_TRUE(e) << left.size() << " DISCONNECTED events missing";
    auto it = std::find(left.begin(), left.end(), e->id);
    ASSERT_TRUE(e->type == RDMA_CM_EVENT_DISCONNECTED && it != left.end()) << describe(*e);
    left.erase(it);
  }
  for (int i = 0; i < 2; ++i) EXPECT_EQ(qp_state(servers[i]->qp), IBV_QPS_ERR);
  std::vector<ibv_wc> flushed = poll_n(cq, 2);
  ASSERT_EQ(flushed.size(), 2u);
  for (const ibv_wc& wc : flushed) {
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_TRUE(wc.wr_id == 60 || wc.wr_id == 61) << wc.wr_id;
  }
}

TEST_F(CmPeerDeath, ServerKilledClientSeesDisconnectAndFlush) {
  rdma_event_channel* ch = NewChannel();
  ibv_cq* cq = NewCq();
  rdma_cm_id* client = NewId(ch);
  ASSERT_TRUE(ch && cq && client);
  const uint16_t port = free_port();
  ChildProcess child;
  ASSERT_TRUE(child.Start("server", port));
  Report r;
  ASSERT_TRUE(child.Receive(&r)) << "the child did not listen";
  ASSERT_EQ(r.ok, 1);
  ASSERT_NO_FATAL_FAILURE(Resolve(ch, client, port));
  ASSERT_NE(CreateQp(client, cq), nullptr);
  Buffer mem = NewBuffer(4096);
  ASSERT_EQ(post_recv(client->qp, 51, {mem.sge(0, 256)}), 0);
  ASSERT_EQ(rdma_connect(client, nullptr), 0) << std::strerror(errno);
  std::optional<CmEvent> est = expect_event(ch, RDMA_CM_EVENT_ESTABLISHED, client);
  ASSERT_TRUE(est);
  ASSERT_TRUE(child.Receive(&r)) << "the child did not accept";
  ASSERT_EQ(r.ok, 1);
  EXPECT_EQ(r.qpn, est->conn.qp_num);

  child.Kill();
  ASSERT_TRUE(expect_event(ch, RDMA_CM_EVENT_DISCONNECTED, client));
  EXPECT_EQ(qp_state(client->qp), IBV_QPS_ERR);
  EXPECT_TRUE(completed(poll_one(cq), 51, IBV_WC_WR_FLUSH_ERR));
  ASSERT_TRUE(expect_event(ch, RDMA_CM_EVENT_TIMEWAIT_EXIT, client, 0, Millis{3000}));
  EXPECT_TRUE(no_event(ch));
}

// ---------------------------------------------------------------------------------------------
// 11. UD: SIDR tells the client the service's QP number and qkey.

TEST_F(CmUd, SidrConnectGivesQpnQkeyAndAddressThenSendArrives) {
  rdma_event_channel* ch = NewChannel();
  ASSERT_NE(ch, nullptr);
  uint16_t port = 0;
  rdma_cm_id* listener = Listen(ch, &port, 16, RDMA_PS_UDP);
  rdma_cm_id* client = NewId(ch, RDMA_PS_UDP);
  ibv_cq* client_cq = NewCq();
  ibv_cq* server_cq = NewCq();
  ASSERT_TRUE(listener && client && client_cq && server_cq);
  EXPECT_EQ(client->qp_type, IBV_QPT_UD);
  ASSERT_NO_FATAL_FAILURE(Resolve(ch, client, port));
  ASSERT_NE(CreateQp(client, client_cq, IBV_QPT_UD), nullptr);
  EXPECT_EQ(qp_state(client->qp), IBV_QPS_RTS) << "a UD QP is ready at once";
  const std::vector<uint8_t> request = pattern(64, 0x31);
  rdma_conn_param param = conn_param(request);
  ASSERT_EQ(rdma_connect(client, &param), 0) << std::strerror(errno);

  std::optional<CmEvent> req = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, nullptr);
  ASSERT_TRUE(req);
  EXPECT_EQ(req->listen_id, listener);
  rdma_cm_id* server = Own(req->id);
  EXPECT_EQ(server->ps, RDMA_PS_UDP);
  EXPECT_EQ(server->qp_type, IBV_QPT_UD);
  EXPECT_TRUE(starts_with(req->private_data, request));
  ASSERT_NE(CreateQp(server, server_cq, IBV_QPT_UD), nullptr);
  EXPECT_EQ(qp_state(server->qp), IBV_QPS_RTS);
  constexpr uint32_t kGrh = 40, kPayload = 200;
  Buffer server_mem = NewBuffer(4096);
  ASSERT_EQ(post_recv(server->qp, 61, {server_mem.sge(0, kGrh + kPayload)}), 0);
  const std::vector<uint8_t> answer = pattern(100, 0x41);
  rdma_conn_param accept = conn_param(answer);
  ASSERT_EQ(rdma_accept(server, &accept), 0) << std::strerror(errno);

  std::optional<CmEvent> est = expect_event(ch, RDMA_CM_EVENT_ESTABLISHED, client);
  ASSERT_TRUE(est);
  EXPECT_EQ(est->ud.qp_num, server->qp->qp_num);
  EXPECT_EQ(est->ud.qkey, static_cast<uint32_t>(RDMA_UDP_QKEY));
  EXPECT_TRUE(starts_with(est->private_data, answer));
  EXPECT_TRUE(no_event(ch)) << "the passive side of SIDR gets no event";

  ibv_ah_attr ah_attr = est->ud.ah_attr;
  AhPtr ah(ibv_create_ah(pd(), &ah_attr));
  ASSERT_NE(ah, nullptr) << "ibv_create_ah: " << std::strerror(errno);
  Buffer client_mem = NewBuffer(4096);
  const std::vector<uint8_t> payload = pattern(kPayload, 0x51);
  std::copy(payload.begin(), payload.end(), client_mem.data());
  ASSERT_EQ(post_send(client->qp, ud_wr(62, ah.get(), est->ud.qp_num, est->ud.qkey),
                      {client_mem.sge(0, kPayload)}),
            0);
  EXPECT_TRUE(completed(poll_one(client_cq), 62));
  const ibv_wc wc = poll_one(server_cq);
  ASSERT_TRUE(completed(wc, 61));
  EXPECT_EQ(wc.byte_len, kGrh + kPayload);
  EXPECT_EQ(wc.src_qp, client->qp->qp_num);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), server_mem.data() + kGrh))
      << "the payload follows the 40-byte GRH";
}

// ---------------------------------------------------------------------------------------------
// QPs whose CQs the CM makes.

TEST_F(CmFailure, CqsTheCmCreatesCarryTheIdAsContext) {
  // rdma_get_send_comp / rdma_get_recv_comp (rdma_verbs.h) assert that the CQ event's
  // context is the id, as librdmacm's ucma_create_cqs makes it.
  rdma_cm_id* client = NewId(ch_);
  ASSERT_NE(client, nullptr);
  ASSERT_NO_FATAL_FAILURE(Resolve(ch_, client, port_));
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = 4;
  attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  ASSERT_EQ(rdma_create_qp(client, pd(), &attr), 0) << std::strerror(errno);
  ASSERT_NE(client->qp, nullptr);
  ASSERT_NE(client->send_cq, nullptr);
  ASSERT_NE(client->recv_cq, nullptr);
  ASSERT_NE(client->send_cq_channel, nullptr);
  ASSERT_NE(client->recv_cq_channel, nullptr);
  EXPECT_EQ(client->send_cq->channel, client->send_cq_channel);
  EXPECT_EQ(client->recv_cq->channel, client->recv_cq_channel);
  EXPECT_EQ(attr.send_cq, client->send_cq);
  EXPECT_EQ(attr.recv_cq, client->recv_cq);
  EXPECT_EQ(client->send_cq->cq_context, client);
  EXPECT_EQ(client->recv_cq->cq_context, client);
}

// ---------------------------------------------------------------------------------------------
// 12. Devices, event names, options, and what softrdma's CM does not offer.

TEST_F(CmMisc, GetDevicesReturnsSoftrdma0) {
  int n = -1;
  ibv_context** list = rdma_get_devices(&n);
  ASSERT_NE(list, nullptr);
  EXPECT_EQ(n, 1);
  ASSERT_NE(list[0], nullptr);
  EXPECT_STREQ(ibv_get_device_name(list[0]->device), kDeviceName);
  EXPECT_EQ(list[1], nullptr) << "the list ends with a null entry";
  EXPECT_EQ(list[0], ctx()) << "the same context every time";
  rdma_free_devices(list);
}

// Every resolve asks the routes anew: the source found for one destination does not stick
// to the next (the lookups share one socket).
TEST_F(CmMisc, EachResolveFindsTheSourceThatReachesItsDestination) {
  ifaddrs* all = nullptr;
  ASSERT_EQ(getifaddrs(&all), 0);
  std::optional<in_addr> own;
  for (ifaddrs* i = all; i && !own; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
        !(i->ifa_flags & IFF_LOOPBACK))
      own = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr;
  freeifaddrs(all);
  if (!own) GTEST_SKIP() << "no IPv4 address besides loopback";
  rdma_event_channel* ch = NewChannel();
  ASSERT_NE(ch, nullptr);
  auto source_towards = [&](in_addr destination) -> std::optional<in_addr> {
    rdma_cm_id* id = NewId(ch);
    sockaddr_in dst = loopback(9);
    dst.sin_addr = destination;
    if (!id || rdma_resolve_addr(id, nullptr, as_sockaddr(&dst), kResolveTimeoutMs) != 0 ||
        !expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, id))
      return std::nullopt;
    return rdma_get_local_addr(id)->sa_family == AF_INET
               ? std::optional(reinterpret_cast<sockaddr_in*>(rdma_get_local_addr(id))->sin_addr)
               : std::nullopt;
  };
  const in_addr lo = loopback(9).sin_addr;
  for (in_addr destination : {lo, *own, lo}) {
    const std::optional<in_addr> source = source_towards(destination);
    ASSERT_TRUE(source) << "resolving " << inet_ntoa(destination);
    EXPECT_EQ(source->s_addr, destination.s_addr)
        << "a local destination is reached from itself: " << inet_ntoa(destination);
  }
}

TEST_F(CmMisc, AResolveAfterARouteChangeFindsTheNewSource) {
  Report r;
  ASSERT_NO_FATAL_FAILURE(RunChild("route_change", free_port(), Millis{8000}, r));
  if (r.setup_err) GTEST_SKIP() << no_namespace(r);
  ASSERT_EQ(r.ok, 1);
  EXPECT_EQ(r.sources[0], inet_addr("127.0.0.1"));
  EXPECT_EQ(r.sources[1], inet_addr("10.7.7.7")) << "the route's new source was not found";
}

TEST_F(CmMisc, EventStrNamesEveryEvent) {
  const std::pair<rdma_cm_event_type, const char*> names[] = {
      {RDMA_CM_EVENT_ADDR_RESOLVED, "RDMA_CM_EVENT_ADDR_RESOLVED"},
      {RDMA_CM_EVENT_ADDR_ERROR, "RDMA_CM_EVENT_ADDR_ERROR"},
      {RDMA_CM_EVENT_ROUTE_RESOLVED, "RDMA_CM_EVENT_ROUTE_RESOLVED"},
      {RDMA_CM_EVENT_ROUTE_ERROR, "RDMA_CM_EVENT_ROUTE_ERROR"},
      {RDMA_CM_EVENT_CONNECT_REQUEST, "RDMA_CM_EVENT_CONNECT_REQUEST"},
      {RDMA_CM_EVENT_CONNECT_RESPONSE, "RDMA_CM_EVENT_CONNECT_RESPONSE"},
      {RDMA_CM_EVENT_CONNECT_ERROR, "RDMA_CM_EVENT_CONNECT_ERROR"},
      {RDMA_CM_EVENT_UNREACHABLE, "RDMA_CM_EVENT_UNREACHABLE"},
      {RDMA_CM_EVENT_REJECTED, "RDMA_CM_EVENT_REJECTED"},
      {RDMA_CM_EVENT_ESTABLISHED, "RDMA_CM_EVENT_ESTABLISHED"},
      {RDMA_CM_EVENT_DISCONNECTED, "RDMA_CM_EVENT_DISCONNECTED"},
      {RDMA_CM_EVENT_DEVICE_REMOVAL, "RDMA_CM_EVENT_DEVICE_REMOVAL"},
      {RDMA_CM_EVENT_MULTICAST_JOIN, "RDMA_CM_EVENT_MULTICAST_JOIN"},
      {RDMA_CM_EVENT_MULTICAST_ERROR, "RDMA_CM_EVENT_MULTICAST_ERROR"},
      {RDMA_CM_EVENT_ADDR_CHANGE, "RDMA_CM_EVENT_ADDR_CHANGE"},
      {RDMA_CM_EVENT_TIMEWAIT_EXIT, "RDMA_CM_EVENT_TIMEWAIT_EXIT"},
  };
  for (const auto& [event, name] : names) EXPECT_STREQ(rdma_event_str(event), name);
}

TEST_F(CmMisc, SetOptionTosSucceeds) {
  rdma_event_channel* ch = NewChannel();
  rdma_cm_id* id = NewId(ch);
  ASSERT_TRUE(ch && id);
  uint8_t tos = 0x20;
  EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos), 0)
      << std::strerror(errno);
}

// rdma_join_multicast: the id needs a device first; the join reports the group's address,
// QP number 0xFFFFFF, RDMA_UDP_QKEY and the join's context; joining a group twice, joining
// a unicast address and leaving a group not joined fail. (Traffic: McastTest, mckey and
// rdma-core's multicast tests.)
TEST_F(CmMisc, JoinAndLeaveMulticastGroups) {
  rdma_event_channel* ch = NewChannel();
  rdma_cm_id* id = NewId(ch, RDMA_PS_UDP);
  ASSERT_TRUE(ch && id);
  sockaddr_in group = loopback(0);
  group.sin_addr.s_addr = htonl(0xe0000101);  // 224.0.1.1
  int context = 0;
  errno = 0;
  EXPECT_EQ(rdma_join_multicast(id, as_sockaddr(&group), &context), -1);
  EXPECT_EQ(errno, EINVAL) << "no device yet";
  EXPECT_TRUE(no_event(ch));
  sockaddr_in here = loopback(0);
  ASSERT_EQ(rdma_bind_addr(id, as_sockaddr(&here)), 0);
  ASSERT_NE(CreateQp(id, NewCq(), IBV_QPT_UD), nullptr);
  ASSERT_EQ(rdma_join_multicast(id, as_sockaddr(&group), &context), 0) << std::strerror(errno);
  rdma_cm_event* event = nullptr;
  ASSERT_TRUE(wait_readable(ch->fd, kTimeout));
  ASSERT_EQ(rdma_get_cm_event(ch, &event), 0);
  EXPECT_EQ(event->event, RDMA_CM_EVENT_MULTICAST_JOIN);
  EXPECT_EQ(event->param.ud.private_data, &context);
  EXPECT_EQ(event->param.ud.qp_num, 0xffffffu);
  EXPECT_EQ(event->param.ud.qkey, static_cast<uint32_t>(RDMA_UDP_QKEY));
  EXPECT_EQ(std::memcmp(&event->param.ud.ah_attr.grh.dgid.raw[12], &group.sin_addr, 4), 0);
  rdma_ack_cm_event(event);
  EXPECT_EQ(rdma_join_multicast(id, as_sockaddr(&group), &context), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  sockaddr_in unicast = loopback(0);
  EXPECT_EQ(rdma_join_multicast(id, as_sockaddr(&unicast), nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rdma_leave_multicast(id, as_sockaddr(&group)), 0);
  EXPECT_EQ(rdma_leave_multicast(id, as_sockaddr(&group)), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  EXPECT_TRUE(no_event(ch));
}

TEST_F(CmMisc, RsocketIsNotImplemented) {
  errno = 0;
  EXPECT_EQ(rsocket(AF_INET, SOCK_STREAM, 0), -1);
  EXPECT_EQ(errno, ENOSYS);
}

/// In a network namespace of its own: the source a resolve finds towards 192.0.2.1, then
/// the one it finds once the route there names another (sources found are kept until the
/// kernel announces a change, which the CM thread a listener starts watches for).
int child_route_change(int fd, uint16_t port) {
  Report r;
  if (!own_network_namespace(fd, r)) return 0;
  if (std::system("ip route add 192.0.2.0/24 dev lo src 127.0.0.1") != 0)
    return child_fail(fd, r, "ip route add");
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* listener = nullptr;
  sockaddr_in addr = loopback(port);
  if (!ch || rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP) != 0 ||
      rdma_bind_addr(listener, as_sockaddr(&addr)) != 0 || rdma_listen(listener, 1) != 0)
    return child_fail(fd, r, "listen");
  auto source = [&]() -> uint32_t {
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) return 0;
    sockaddr_in dst = loopback(9);
    dst.sin_addr.s_addr = htonl(0xc0000201);  // 192.0.2.1 (TEST-NET-1)
    uint32_t found = 0;
    if (rdma_resolve_addr(id, nullptr, as_sockaddr(&dst), kResolveTimeoutMs) == 0 &&
        child_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, r))
      found = reinterpret_cast<sockaddr_in*>(rdma_get_local_addr(id))->sin_addr.s_addr;
    rdma_destroy_id(id);
    return found;
  };
  r.sources[0] = source();
  source();  // found again, from what was kept
  if (std::system("ip addr add 10.7.7.7/32 dev lo && "
                  "ip route replace 192.0.2.0/24 dev lo src 10.7.7.7") != 0)
    return child_fail(fd, r, "ip route replace");
  // The CM thread hears of the change within microseconds; until then the old source may
  // still be found, as just before the change.
  const auto deadline = Clock::now() + Millis{2000};
  for (;;) {
    r.sources[1] = source();
    if (r.sources[1] != r.sources[0] || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(Millis{10});
  }
  r.ok = 1;
  write_all(fd, &r, sizeof r);
  rdma_destroy_id(listener);
  rdma_destroy_event_channel(ch);
  return 0;
}

}  // namespace

/// The child roles: `<program> --cm-child <role> <report fd> <port>`.
int child_main(int argc, char** argv) {
  if (argc < 5) return 2;
  const std::string role = argv[2];
  const int fd = std::atoi(argv[3]);
  const auto port = static_cast<uint16_t>(std::atoi(argv[4]));
  if (role == "client") return child_client(fd, port, 1);
  if (role == "two_clients") return child_client(fd, port, 2);
  if (role == "server") return child_server(fd, port);
  if (role == "unroutable") return child_unroutable(fd);
  if (role == "self_connect") return child_self_connect(fd, port);
  if (role == "route_change") return child_route_change(fd, port);
  return 2;
}

}  // namespace softrdma_test

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], softrdma_test::kChildFlag) == 0)
    return softrdma_test::child_main(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

namespace softrdma_test {
namespace {

// Binding: a specific address gives the id its device at once, the wildcard leaves it to the
// connection; port 0 takes an ephemeral port; a port in use is refused.
TEST_F(CmMisc, BindSpecificWildcardAndEphemeral) {
  rdma_event_channel* ch = NewChannel();
  rdma_cm_id* specific = NewId(ch);
  rdma_cm_id* wildcard = NewId(ch);
  rdma_cm_id* twin = NewId(ch);
  ASSERT_TRUE(ch && specific && wildcard && twin);

  sockaddr_in local = loopback(0);
  ASSERT_EQ(rdma_bind_addr(specific, as_sockaddr(&local)), 0) << std::strerror(errno);
  const uint16_t port = ntohs(rdma_get_src_port(specific));
  EXPECT_NE(port, 0) << "port 0 takes an ephemeral port";
  EXPECT_NE(specific->verbs, nullptr) << "a specific address names the device";
  EXPECT_EQ(ibv_get_device_name(specific->verbs->device), std::string(kDeviceName));
  EXPECT_NE(specific->pd, nullptr) << "bound to the device, the id has its default PD";

  sockaddr_in any{};
  any.sin_family = AF_INET;
  ASSERT_EQ(rdma_bind_addr(wildcard, as_sockaddr(&any)), 0) << std::strerror(errno);
  EXPECT_EQ(wildcard->verbs, nullptr) << "the wildcard leaves the device to the connection";
  EXPECT_EQ(wildcard->pd, nullptr);
  EXPECT_NE(rdma_get_src_port(wildcard), 0);

  ASSERT_EQ(rdma_listen(specific, 4), 0);
  sockaddr_in same = loopback(port);
  EXPECT_EQ(rdma_bind_addr(twin, as_sockaddr(&same)), -1);
  EXPECT_EQ(errno, EADDRINUSE);
}

}  // namespace
}  // namespace softrdma_test

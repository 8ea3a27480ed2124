// Shared helpers of the softrdma connection-manager tests: events copied out of a channel
// with a bounded wait, a fixture owning ids, channels, CQs and a PD on the CM's device,
// free TCP ports on 127.0.0.1, and a watchdog for the calls that block without a timeout.
//
// The tests are built against the system's librdmacm and libibverbs; at run time
// LD_LIBRARY_PATH selects softrdma's drop-in libraries, which CmTest checks.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/subprocess.hpp"
#include "verbs_fixture.hpp"

namespace softrdma_test {

/// The timeout the tests pass to rdma_resolve_addr / rdma_resolve_route.
inline constexpr int kResolveTimeoutMs = 2000;

/// Consumer-defined reject reason (IBTA): rdma_reject and a full backlog.
inline constexpr int kRejectConsumer = 28;
/// "Invalid service ID" (IBTA): nobody listens on that port.
inline constexpr int kRejectInvalidServiceId = 8;

/// An event copied out of its channel and acknowledged at once: everything a test looks at,
/// with the private data in a vector the test owns.
struct CmEvent {
  rdma_cm_event_type type{};
  int status = 0;
  rdma_cm_id* id = nullptr;
  rdma_cm_id* listen_id = nullptr;
  rdma_conn_param conn{};  // private_data cleared: see `private_data`
  rdma_ud_param ud{};      // likewise
  std::vector<uint8_t> private_data;
};

inline std::string describe(const CmEvent& e) {
  return std::string(rdma_event_str(e.type)) + " status=" + std::to_string(e.status);
}

/// The next event of `channel`, or nothing if none arrives within `timeout`.
inline std::optional<CmEvent> try_next_event(rdma_event_channel* channel, Millis timeout) {
  if (!wait_readable(channel->fd, timeout)) return std::nullopt;
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(channel, &event) != 0) return std::nullopt;
  CmEvent out;
  out.type = event->event;
  out.status = event->status;
  out.id = event->id;
  out.listen_id = event->listen_id;
  const bool ud = event->id && event->id->ps == RDMA_PS_UDP;
  const void* data = ud ? event->param.ud.private_data : event->param.conn.private_data;
  const uint8_t length = ud ? event->param.ud.private_data_len : event->param.conn.private_data_len;
  if (data && length) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    out.private_data.assign(bytes, bytes + length);
  }
  if (ud) {
    out.ud = event->param.ud;
    out.ud.private_data = nullptr;
  } else {
    out.conn = event->param.conn;
    out.conn.private_data = nullptr;
  }
  rdma_ack_cm_event(event);
  return out;
}

/// The next event of `channel`; fails the test if none arrives within `timeout`.
inline std::optional<CmEvent> next_event(rdma_event_channel* channel, Millis timeout = kTimeout) {
  std::optional<CmEvent> e = try_next_event(channel, timeout);
  if (!e) ADD_FAILURE() << "no CM event within " << timeout.count() << " ms";
  return e;
}

/// The next event of `channel`, which must be `type` for `id` (any id if null) with `status`.
inline std::optional<CmEvent> expect_event(rdma_event_channel* channel, rdma_cm_event_type type,
                                           rdma_cm_id* id, int status = 0,
                                           Millis timeout = kTimeout) {
  std::optional<CmEvent> e = next_event(channel, timeout);
  if (!e) {
    ADD_FAILURE() << "expected " << rdma_event_str(type);
    return e;
  }
  if (e->type != type || e->status != status || (id && e->id != id)) {
    ADD_FAILURE() << "got " << describe(*e) << " for id " << e->id << ", expected "
                  << rdma_event_str(type) << " status=" << status << " for id " << id;
    return std::nullopt;
  }
  return e;
}

/// Success if `channel` stays without events for `quiet`.
inline ::testing::AssertionResult no_event(rdma_event_channel* channel, Millis quiet = kQuiet) {
  if (std::optional<CmEvent> e = try_next_event(channel, quiet))
    return ::testing::AssertionFailure() << "unexpected " << describe(*e) << " for id " << e->id;
  return ::testing::AssertionSuccess();
}

/// True if the first bytes of `got` are `want` (IB pads private data to its fixed size).
inline ::testing::AssertionResult starts_with(const std::vector<uint8_t>& got,
                                              const std::vector<uint8_t>& want) {
  if (got.size() >= want.size() && std::equal(want.begin(), want.end(), got.begin()))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "private data of " << got.size() << " bytes does not start with the " << want.size()
         << " bytes sent";
}

/// `n` bytes of a recognisable pattern.
inline std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

inline sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

inline sockaddr* as_sockaddr(sockaddr_in* a) {
  return reinterpret_cast<sockaddr*>(a);
}

/// A TCP port of 127.0.0.1 that nobody used a moment ago (the kernel's choice for port 0).
inline uint16_t free_port() {
  return static_cast<uint16_t>(rdmakit::testing::free_tcp_port());
}

/// Ends the process if it is still alive after `limit`: for calls that block without a
/// timeout of their own (rdma_get_request, rdma_get_recv_comp, ...).
class Watchdog {
 public:
  Watchdog(Millis limit, std::string what)
      : thread_([this, limit, what = std::move(what)] {
          std::unique_lock lock(mutex_);
          if (cv_.wait_for(lock, limit, [this] { return done_; })) return;
          std::fprintf(stderr, "watchdog: %s did not finish within %lld ms\n", what.c_str(),
                       static_cast<long long>(limit.count()));
          std::fflush(stderr);
          std::_Exit(3);
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

/// Opens the CM's device (rdma_get_devices: softrdma0 when LD_LIBRARY_PATH selects softrdma),
/// a PD on it, and owns the ids, channels and CQs a test makes. TearDown destroys ids (and
/// their QPs) first, then CQs, the PD and the channels.
class CmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    ibv_context** list = rdma_get_devices(&n);
    ASSERT_NE(list, nullptr) << "rdma_get_devices: " << std::strerror(errno);
    ctx_ = n > 0 ? list[0] : nullptr;
    rdma_free_devices(list);
    ASSERT_NE(ctx_, nullptr) << "no RDMA device: is LD_LIBRARY_PATH set to softrdma's lib?";
    ASSERT_STREQ(ibv_get_device_name(ctx_->device), kDeviceName) << "not running on softrdma";
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr) << "ibv_alloc_pd: " << std::strerror(errno);
  }

  void TearDown() override {
    for (auto it = ids_.rbegin(); it != ids_.rend(); ++it) destroy_id(*it);
    ids_.clear();
    cqs_.clear();
    if (pd_) {
      EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
    }
    pd_ = nullptr;
    for (rdma_event_channel* ch : channels_) rdma_destroy_event_channel(ch);
    channels_.clear();
  }

  ibv_context* ctx() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }

  rdma_event_channel* NewChannel() {
    rdma_event_channel* ch = rdma_create_event_channel();
    if (!ch) {
      ADD_FAILURE() << "rdma_create_event_channel: " << std::strerror(errno);
      return nullptr;
    }
    channels_.push_back(ch);
    return ch;
  }

  rdma_cm_id* NewId(rdma_event_channel* ch, rdma_port_space ps = RDMA_PS_TCP,
                    void* context = nullptr) {
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(ch, &id, context, ps) != 0) {
      ADD_FAILURE() << "rdma_create_id: " << std::strerror(errno);
      return nullptr;
    }
    ids_.push_back(id);
    return id;
  }

  /// Takes ownership of an id the CM made (a CONNECT_REQUEST's new id).
  rdma_cm_id* Own(rdma_cm_id* id) {
    if (id && std::find(ids_.begin(), ids_.end(), id) == ids_.end()) ids_.push_back(id);
    return id;
  }

  /// Destroys an owned id (and its QP) now.
  void DestroyIdNow(rdma_cm_id* id) {
    auto it = std::find(ids_.begin(), ids_.end(), id);
    if (it == ids_.end()) {
      ADD_FAILURE() << "id not owned by the fixture";
      return;
    }
    ids_.erase(it);
    destroy_id(id);
  }

  ibv_cq* NewCq(int cqe = 256) {
    cqs_.emplace_back(ibv_create_cq(ctx_, cqe, nullptr, nullptr, 0));
    if (!cqs_.back()) ADD_FAILURE() << "ibv_create_cq: " << std::strerror(errno);
    return cqs_.back().get();
  }

  /// A registered buffer on the fixture's PD; it must not outlive the test body.
  Buffer NewBuffer(size_t size, uint8_t fill = 0) {
    Buffer b = allocate_buffer(size, fill);
    b.mr.reset(ibv_reg_mr(pd_, b.data(), size, kRemoteAccess));
    if (!b.mr) ADD_FAILURE() << "ibv_reg_mr(" << size << "): " << std::strerror(errno);
    return b;
  }

  /// A listening id bound to 127.0.0.1 on a free port (returned in *port).
  rdma_cm_id* Listen(rdma_event_channel* ch, uint16_t* port, int backlog = 16,
                     rdma_port_space ps = RDMA_PS_TCP) {
    rdma_cm_id* id = NewId(ch, ps);
    if (!id) return nullptr;
    for (int attempt = 0; attempt < 8; ++attempt) {
      sockaddr_in addr = loopback(free_port());
      if (rdma_bind_addr(id, as_sockaddr(&addr)) != 0) continue;  // the port was taken
      if (rdma_listen(id, backlog) != 0) {
        ADD_FAILURE() << "rdma_listen: " << std::strerror(errno);
        return nullptr;
      }
      *port = ntohs(rdma_get_src_port(id));
      EXPECT_EQ(*port, ntohs(addr.sin_port));
      return id;
    }
    ADD_FAILURE() << "rdma_bind_addr: no free port: " << std::strerror(errno);
    return nullptr;
  }

  /// Resolves `id`'s address and route towards 127.0.0.1:port, taking both events from
  /// `ch`. Use as ASSERT_NO_FATAL_FAILURE(Resolve(...)).
  void Resolve(rdma_event_channel* ch, rdma_cm_id* id, uint16_t port) {
    sockaddr_in dst = loopback(port);
    ASSERT_EQ(rdma_resolve_addr(id, nullptr, as_sockaddr(&dst), kResolveTimeoutMs), 0)
        << std::strerror(errno);
    ASSERT_TRUE(expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, id));
    ASSERT_EQ(rdma_resolve_route(id, kResolveTimeoutMs), 0) << std::strerror(errno);
    ASSERT_TRUE(expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, id));
  }

  /// A QP on `id` (fixture PD) whose send and receive completions go to `cq`.
  ibv_qp* CreateQp(rdma_cm_id* id, ibv_cq* cq, ibv_qp_type type = IBV_QPT_RC,
                   const QpCaps& caps = {}) {
    ibv_qp_init_attr attr = qp_init_attr(type, cq, cq, caps);
    if (rdma_create_qp(id, pd_, &attr) != 0) {
      ADD_FAILURE() << "rdma_create_qp: " << std::strerror(errno);
      return nullptr;
    }
    return id->qp;
  }

 private:
  static void destroy_id(rdma_cm_id* id) {
    if (id->qp) rdma_destroy_qp(id);
    EXPECT_EQ(rdma_destroy_id(id), 0) << std::strerror(errno);
  }

  ibv_context* ctx_ = nullptr;  // the CM's, never closed here
  ibv_pd* pd_ = nullptr;
  std::vector<rdma_event_channel*> channels_;
  std::vector<CqPtr> cqs_;
  std::vector<rdma_cm_id*> ids_;
};

/// Connection parameters carrying `data` as private data.
inline rdma_conn_param conn_param(const std::vector<uint8_t>& data) {
  rdma_conn_param p{};
  p.private_data = data.empty() ? nullptr : data.data();
  p.private_data_len = static_cast<uint8_t>(data.size());
  p.responder_resources = 1;
  p.initiator_depth = 1;
  p.retry_count = 7;
  p.rnr_retry_count = 7;
  return p;
}

/// CmTest with one channel shared by a listener and the clients.
class CmConnTest : public CmTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(CmTest::SetUp());
    ch_ = NewChannel();
    ASSERT_NE(ch_, nullptr);
    listener_ = Listen(ch_, &port_);
    ASSERT_NE(listener_, nullptr);
  }

  /// A client on ch_ with a QP that connects to `port` of 127.0.0.1 with `data` as private
  /// data. Use as ASSERT_NO_FATAL_FAILURE(ConnectTo(...)).
  void ConnectTo(uint16_t port, const std::vector<uint8_t>& data, rdma_cm_id** client) {
    *client = NewId(ch_);
    ibv_cq* cq = NewCq();
    ASSERT_TRUE(*client && cq);
    ASSERT_NO_FATAL_FAILURE(Resolve(ch_, *client, port));
    ASSERT_NE(CreateQp(*client, cq), nullptr);
    rdma_conn_param param = conn_param(data);
    ASSERT_EQ(rdma_connect(*client, &param), 0) << std::strerror(errno);
  }

  struct Pair {
    rdma_cm_id* client = nullptr;
    rdma_cm_id* server = nullptr;  // the listener's new id
    ibv_cq* client_cq = nullptr;
    ibv_cq* server_cq = nullptr;
  };

  /// A client id connected to the listener, both with QPs in RTS. Use as
  /// ASSERT_NO_FATAL_FAILURE(ConnectPair(&pair)).
  void ConnectPair(Pair* out) {
    Pair p;
    p.client_cq = NewCq();
    p.server_cq = NewCq();
    p.client = NewId(ch_);
    ASSERT_TRUE(p.client_cq && p.server_cq && p.client);
    ASSERT_NO_FATAL_FAILURE(Resolve(ch_, p.client, port_));
    ASSERT_NE(CreateQp(p.client, p.client_cq), nullptr);
    rdma_conn_param param = conn_param({});
    ASSERT_EQ(rdma_connect(p.client, &param), 0) << std::strerror(errno);
    std::optional<CmEvent> req = expect_event(ch_, RDMA_CM_EVENT_CONNECT_REQUEST, nullptr);
    ASSERT_TRUE(req);
    ASSERT_EQ(req->listen_id, listener_);
    p.server = Own(req->id);
    ASSERT_NE(CreateQp(p.server, p.server_cq), nullptr);
    ASSERT_EQ(rdma_accept(p.server, &param), 0) << std::strerror(errno);
    bool client_up = false, server_up = false;
    for (int i = 0; i < 2; ++i) {
      std::optional<CmEvent> e = next_event(ch_);
      ASSERT_TRUE(e);
      ASSERT_EQ(e->type, RDMA_CM_EVENT_ESTABLISHED) << describe(*e);
      (e->id == p.client ? client_up : server_up) = true;
    }
    ASSERT_TRUE(client_up && server_up);
    ASSERT_EQ(qp_state(p.client->qp), IBV_QPS_RTS);
    ASSERT_EQ(qp_state(p.server->qp), IBV_QPS_RTS);
    *out = p;
  }

  /// One DISCONNECTED for each id of `ids` (in any order), nothing else.
  void ExpectDisconnected(std::vector<rdma_cm_id*> ids) {
    while (!ids.empty()) {
      std::optional<CmEvent> e = next_event(ch_);
      ASSERT_TRUE(e) << ids.size() << " DISCONNECTED events missing";
      auto it = std::find(ids.begin(), ids.end(), e->id);
      ASSERT_TRUE(e->type == RDMA_CM_EVENT_DISCONNECTED && it != ids.end())
          << "unexpected " << describe(*e) << " for id " << e->id;
      EXPECT_EQ(e->status, 0);
      ids.erase(it);
    }
  }

  /// One TIMEWAIT_EXIT for each id of `ids`, all within `within`.
  void ExpectTimewaitExit(std::vector<rdma_cm_id*> ids, Millis within = Millis{3000}) {
    const auto deadline = Clock::now() + within;
    while (!ids.empty()) {
      const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
      std::optional<CmEvent> e = next_event(ch_, std::max(left, Millis{1}));
      ASSERT_TRUE(e) << ids.size() << " TIMEWAIT_EXIT events missing after " << within.count()
                     << " ms";
      auto it = std::find(ids.begin(), ids.end(), e->id);
      ASSERT_TRUE(e->type == RDMA_CM_EVENT_TIMEWAIT_EXIT && it != ids.end())
          << "unexpected " << describe(*e) << " for id " << e->id;
      ids.erase(it);
    }
  }

  rdma_event_channel* ch_ = nullptr;
  rdma_cm_id* listener_ = nullptr;
  uint16_t port_ = 0;
};

}  // namespace softrdma_test

#include "cm/cm_engine.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "cm/cm_context.hpp"
#include "cm/route_lookup.hpp"
#include "common/background_thread.hpp"
#include "common/current_pid.hpp"
#include "common/log.hpp"
#include "common/secure_random.hpp"
#include "common/self_connect.hpp"
#include "engine/psn.hpp"
#include "wire/socket_io.hpp"

namespace softrdma::cm {
namespace {

using Clock = std::chrono::steady_clock;

// Links without a connection that a process keeps for its next connections to the same
// listeners; a link left idle beyond these is closed.
constexpr size_t kIdleLinksKept = 16;

// Messages a link holds for a peer that does not read them before it is cut off.
constexpr size_t kMaxQueuedBytes = size_t{1} << 20;
// What one turn reads from a link at most.
constexpr size_t kReadPerTurn = 64 << 10;
// A link's send buffer: CM messages are small, and a link lives as long as its process;
// autotuning would let an idle link's buffer grow to megabytes of kernel memory.
constexpr int kLinkSendBuffer = 64 << 10;

// No Nagle (a disconnect must not wait for a delayed ACK), keepalive, a bounded buffer.
void tune_link(int fd) {
  wire::tune_socket(fd);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kLinkSendBuffer, sizeof kLinkSendBuffer);
}

// Where an active link goes: its source address, the listener's address and port.
using LinkKey = std::tuple<uint32_t, uint32_t, uint16_t>;

LinkKey key_of(const CmId* id) {
  return {id->id.route.addr.src_sin.sin_addr.s_addr, id->id.route.addr.dst_sin.sin_addr.s_addr,
          id->id.route.addr.dst_sin.sin_port};
}

// A CM socket: a listener, or a link, the TCP connection that carries every connection
// between this process and one listener of a peer process.
struct Watch {
  CmId* listening = nullptr;     // a listener's socket: its id
  bool active = false;           // a link this process made (it numbers the connections)
  bool connecting = false;       // ... whose TCP connection is not made yet
  bool reusable = false;         // ... that new connections to the same listener may take
  LinkKey key{};                 // ... and where it goes
  CmId* accepted_for = nullptr;  // a link this process accepted: the listener it reaches
  sockaddr_in local{};
  sockaddr_in peer{};
  std::map<uint32_t, CmId*> conns;  // the connections on the link, by number
  uint32_t last_conn = 0;           // active: the number given last
  std::vector<uint8_t> in;          // received bytes of a message not yet whole
  std::vector<uint8_t> out;         // messages the socket had no room for yet
  bool room_wanted = false;         // watched for EPOLLOUT
  bool cut = false;                 // its peer left too much unread: it is being reset
};

struct Timer {
  CmId* id;
  std::function<void(CmId*)> fn;
};

// How long the CM's sockets stay with the application after its last thread waiting for
// an event returns: a thread setting up connections is back for the next event within
// microseconds, and handing the sockets to the CM thread and claiming them again would
// cost two calls per event, besides waking that thread for whatever arrives in between.
// Meanwhile a message waits for the next waiter, or this long for the CM thread.
constexpr std::chrono::milliseconds kHandBackAfter{1};
// A waiter blocked longer than this is not coming back soon: the CM thread stops looking
// and is woken when the waiter returns.
constexpr std::chrono::milliseconds kLongWait{20};

struct Engine {
  std::mutex mutex;
  int epfd = -1;      // what the CM thread sleeps on: wake_fd, and `sockets` while it has them
  int sockets = -1;   // an epoll set of every CM socket
  int wake_fd = -1;   // an eventfd that interrupts epoll_wait when it must wake sooner
  int route_fd = -1;  // readable when routes or addresses changed (route_lookup.hpp)
  bool thread_has_sockets = true;   // `sockets` is in epfd
  int claimed = 0;                  // threads waiting for an event that serve `sockets`
  Clock::time_point claimed_at{};   // when `claimed` last left 0
  Clock::time_point released_at{};  // when it last came back to 0
  bool checking = false;            // the CM thread wakes to take the sockets back (kHandBackAfter)
  std::map<int, Watch> watches;
  std::map<LinkKey, int> reusable_links;
  using Timers = std::multimap<Clock::time_point, Timer>;
  Timers timers;
  // Each id's timers: an id that goes away drops its own without a walk over everyone's
  // (after a disconnect every id has one, for TIMEWAIT_EXIT).
  std::unordered_multimap<CmId*, Timers::iterator> timers_of;
  // When the thread wakes by itself at the latest: a timer due later needs no wake-up (each
  // rdma_connect adds one, and waking the thread for it would cost the connection a switch).
  Clock::time_point sleeps_until = Clock::time_point::max();
  pid_t pid = 0;
};

Engine& engine() {
  static auto* e = new Engine();
  return *e;
}

void loop();

// Takes timer `it` out of both indexes.
void drop_timer(Engine& e, Engine::Timers::iterator it) {
  auto [first, last] = e.timers_of.equal_range(it->second.id);
  for (auto i = first; i != last; ++i) {
    if (i->second != it) continue;
    e.timers_of.erase(i);
    break;
  }
  e.timers.erase(it);
}

void epoll_add(int epfd, int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

// Caller holds the mutex. A forked child gets a fresh engine and thread.
void ensure_started(Engine& e) {
  if (e.pid == current_pid()) return;
  e.pid = current_pid();
  e.watches.clear();
  e.reusable_links.clear();
  e.timers.clear();
  e.timers_of.clear();
  e.claimed = 0;
  e.thread_has_sockets = true;
  e.checking = false;
  e.epfd = epoll_create1(EPOLL_CLOEXEC);
  e.sockets = epoll_create1(EPOLL_CLOEXEC);
  e.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_add(e.epfd, e.wake_fd, EPOLLIN);
  epoll_add(e.epfd, e.sockets, EPOLLIN);
  e.route_fd = watch_route_changes();
  if (e.route_fd >= 0) epoll_add(e.epfd, e.route_fd, EPOLLIN);
  start_background_thread("softrdma-cm", loop);
}

// The watch of a descriptor just opened (a number closed before may come back).
Watch& new_watch(Engine& e, int fd, uint32_t events) {
  Watch& w = e.watches[fd];
  w = Watch{};
  epoll_add(e.sockets, fd, events);
  return w;
}

void set_events(Engine& e, int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  epoll_ctl(e.sockets, EPOLL_CTL_MOD, fd, &ev);
}

constexpr uint32_t kLinkEvents = EPOLLIN | EPOLLRDHUP;

// New connections no longer take link `w`.
void stop_reusing(Engine& e, Watch& w) {
  if (!w.reusable) return;
  w.reusable = false;
  e.reusable_links.erase(w.key);
}

void close_link(Engine& e, int fd) {
  auto it = e.watches.find(fd);
  if (it == e.watches.end()) return;
  stop_reusing(e, it->second);
  epoll_ctl(e.sockets, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  e.watches.erase(it);
}

// Asks for EPOLLOUT while messages wait for room (or a connect for its outcome), or not.
void want_room(Engine& e, int fd, Watch& w, bool want) {
  if (w.room_wanted == want) return;
  w.room_wanted = want;
  set_events(e, fd, want ? kLinkEvents | EPOLLOUT : kLinkEvents);
}

// Sends what `w.out` holds; the rest waits for the socket to drain.
void flush_out(Engine& e, int fd, Watch& w) {
  while (!w.out.empty()) {
    const ssize_t n = send(fd, w.out.data(), w.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      w.out.erase(w.out.begin(), w.out.begin() + n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return want_room(e, fd, w, true);
    } else {
      break;  // broken: reading finds that (an error or hang-up is always reported)
    }
  }
  want_room(e, fd, w, false);
}

// Queues `m` on link `fd` and sends it if the link is made; false if the link is gone or
// broken. The CM's calls must not block, so what the socket has no room for waits in the
// link; a peer that leaves kMaxQueuedBytes unread is cut off.
bool send_on(Engine& e, int fd, const CmMsg& m) {
  auto it = e.watches.find(fd);
  if (it == e.watches.end()) return false;
  Watch& w = it->second;
  if (w.cut) return false;
  if (w.out.size() + sizeof m > kMaxQueuedBytes) {
    // Reset, not closed: nothing more is owed to this peer. The next turn on the socket
    // ends the link and its connections (not here: the caller may be in the middle of one).
    w.cut = true;
    const linger reset{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    shutdown(fd, SHUT_RDWR);
    return false;
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(&m);
  size_t sent = 0;
  if (w.out.empty() && !w.connecting) {
    const ssize_t n = send(fd, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    sent = n > 0 ? static_cast<size_t>(n) : 0;
    if (sent == sizeof m) return true;
  }
  w.out.insert(w.out.end(), bytes + sent, bytes + sizeof m);
  if (!w.connecting) want_room(e, fd, w, true);
  return true;
}

// Puts `id` on link `fd` under a new number.
void attach(Engine& e, CmId* id, int fd) {
  Watch& w = e.watches[fd];
  do {
    ++w.last_conn;
  } while (w.last_conn == 0 || w.conns.count(w.last_conn));
  id->sock = fd;
  id->conn = w.last_conn;
  w.conns[id->conn] = id;
}

// The id's source address is the link's (its port too, as rdma_get_src_port reports).
void take_link_source(CmId* id, const Watch& w) {
  std::memcpy(&id->id.route.addr.src_storage, &w.local, sizeof w.local);
}

size_t idle_active_links(const Engine& e) {
  size_t n = 0;
  for (const auto& [key, fd] : e.reusable_links) {
    const Watch& w = e.watches.at(fd);
    n += w.conns.empty() && !w.connecting;
  }
  return n;
}

// A link that carries nothing any more: an active one is kept for the next connection to
// its listener (up to kIdleLinksKept), an accepted one until its peer closes it or its
// listener goes away.
void retire_if_idle(Engine& e, int fd) {
  const Watch& w = e.watches.at(fd);
  if (!w.conns.empty() || w.connecting) return;
  if (w.active ? w.reusable && idle_active_links(e) <= kIdleLinksKept : w.accepted_for != nullptr)
    return;
  close_link(e, fd);
}

// Takes every connection off link `fd` and closes it; returns them.
std::vector<CmId*> detach_all(Engine& e, int fd) {
  std::vector<CmId*> ids;
  for (const auto& [n, id] : e.watches.at(fd).conns) {
    ids.push_back(id);
    id->sock = -1;
    id->conn = 0;
  }
  close_link(e, fd);
  return ids;
}

void on_connection_lost(CmId* id, bool link_broke);
bool retry_refused(CmId* id);

// A connection request arrived on a link this process accepted: a new child id and
// CONNECT_REQUEST, or a refusal on the link.
void on_request(Engine& e, int fd, Watch& w, const CmMsg& m) {
  CmId* listener = w.accepted_for;
  const bool ud = m.type == MsgType::kSidrReq;
  auto refuse = [&](int status) {
    CmMsg r = make_msg(ud ? MsgType::kSidrRep : MsgType::kRej);
    r.conn = m.conn;
    r.reject_status = static_cast<uint8_t>(status);
    send_on(e, fd, r);
  };
  // The listener is gone (the link outlived it): nobody listens, as a new connection to
  // the port would be refused.
  if (!listener || listener->state != IdState::kListening) return refuse(kRejectInvalidServiceId);
  if (listener->pending_requests >= listener->backlog) return refuse(kRejectConsumer);
  auto* child = new CmId();
  child->id.channel = listener->id.channel;
  child->channel = listener->channel;
  child->synchronous = listener->synchronous;
  child->id.context = listener->id.context;
  child->id.ps = listener->id.ps;
  child->id.qp_type = listener->id.qp_type;
  attach_to_device(&child->id);
  child->sock = fd;
  child->conn = m.conn;
  w.conns[m.conn] = child;
  child->listener = listener;
  child->peer = m;
  child->local_psn = secure_random_u32() & psn::kMask;  // as librdmacm: a random start
  child->retry_count = m.retry_count;
  child->rnr_retry_count = m.rnr_retry_count;
  child->state = IdState::kRequested;
  take_link_source(child, w);
  std::memcpy(&child->id.route.addr.dst_storage, &w.peer, sizeof w.peer);
  ++listener->pending_requests;
  listener->pending.push_back(child);
  post_event(child, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &m, listener);
}

// A refusal (nobody listens) reached the active side: within kRefusedGrace of the connect,
// the request goes again shortly, on a new link.
bool retry_refused(CmId* id) {
  if (Clock::now() >= id->refused_until) return false;
  Engine& e = engine();
  if (id->conn) {
    auto it = e.watches.find(id->sock);
    if (it != e.watches.end()) stop_reusing(e, it->second);  // its listener is gone
    leave_link(id, false);
  }
  after(id, std::chrono::milliseconds(20), [](CmId* i) {
    if (i->state != IdState::kConnecting) return;
    if (int err = start_connect(i)) {
      i->state = IdState::kRouteResolved;
      post_event(i, RDMA_CM_EVENT_UNREACHABLE, -err);
    }
  });
  return true;
}

void on_message(CmId* id, const CmMsg& m) {
  switch (m.type) {
    case MsgType::kRep:
      if (id->state != IdState::kConnecting) return;
      id->peer = m;
      if (!id->rc_qpn) {
        id->state = IdState::kAwaitEstablish;  // the application moves its QP itself
        post_event(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, &m);
        return;
      }
      if (int err = connect_qp(id)) {
        leave_link(id, true);
        id->state = IdState::kDisconnected;
        post_event(id, RDMA_CM_EVENT_CONNECT_ERROR, -err, &m);
        return;
      }
      send_msg(id, make_msg(MsgType::kRtu));
      id->state = IdState::kConnected;
      post_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, &m);
      return;
    case MsgType::kSidrRep:
      if (id->state != IdState::kConnecting) return;
      if (m.reject_status == kRejectInvalidServiceId && retry_refused(id)) return;
      id->peer = m;
      leave_link(id, false);
      if (m.reject_status) {
        id->state = IdState::kDisconnected;
        post_event(id, RDMA_CM_EVENT_REJECTED, m.reject_status, &m);
        return;
      }
      id->state = IdState::kConnected;
      post_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, &m);
      return;
    case MsgType::kRtu:
      if (id->state != IdState::kAccepting) return;
      id->state = IdState::kConnected;
      post_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, &id->peer);
      return;
    case MsgType::kRej:
      if (id->state != IdState::kConnecting && id->state != IdState::kAwaitEstablish) return;
      if (id->state == IdState::kConnecting && m.reject_status == kRejectInvalidServiceId &&
          retry_refused(id))
        return;
      leave_link(id, false);
      fail_qp(id);  // as librdmacm does for a rejected connection
      id->state = IdState::kDisconnected;
      post_event(id, RDMA_CM_EVENT_REJECTED, m.reject_status, &m);
      return;
    case MsgType::kDreq:
      if (id->state != IdState::kConnected && id->state != IdState::kDisconnecting) return;
      send_msg(id, make_msg(MsgType::kDrep));
      disconnected(id);
      return;
    case MsgType::kDrep:
      if (id->state == IdState::kDisconnecting) disconnected(id);
      return;
    case MsgType::kGone:
      on_connection_lost(id, false);
      return;
    default:
      return;
  }
}

// The peer's end of the connection went away without a word: its link broke, or it left
// the connection (kGone).
void on_connection_lost(CmId* id, bool link_broke) {
  const IdState was = id->state;
  leave_link(id, false);
  switch (was) {
    case IdState::kConnected:
    case IdState::kDisconnecting:
      disconnected(id);
      break;
    case IdState::kConnecting:
      // The request went on a link its passive side was closing (its listener had gone):
      // unanswered, it goes again on a new link.
      if (link_broke && id->on_reused_link) {
        id->on_reused_link = false;
        if (start_connect(id) == 0) break;
      }
      id->state = IdState::kDisconnected;
      post_event(id, RDMA_CM_EVENT_UNREACHABLE, -ECONNRESET);
      break;
    case IdState::kAwaitEstablish:
      id->state = IdState::kDisconnected;
      post_event(id, RDMA_CM_EVENT_UNREACHABLE, -ECONNRESET);
      break;
    case IdState::kAccepting:
      id->state = IdState::kDisconnected;
      post_event(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
      break;
    case IdState::kRequested:  // the requester went away before an answer
      release_backlog_slot(id);
      id->state = IdState::kDisconnected;
      break;
    default:
      id->state = IdState::kDisconnected;
  }
}

void link_broken(Engine& e, int fd) {
  for (CmId* id : detach_all(e, fd)) on_connection_lost(id, true);
}

// The link's TCP connection is made (err 0) or failed: the requests queued on it go out,
// or each connection waiting for it is retried or reported.
void on_connect_done(Engine& e, int fd, int err) {
  Watch& w = e.watches.at(fd);
  w.connecting = false;
  // Connected to itself: nobody listened there, as if refused (each retry binds anew).
  if (err == 0 && connected_to_itself(fd)) {
    reset_on_close(fd);
    err = ECONNREFUSED;
  }
  if (err == 0) {
    socklen_t len = sizeof w.local;
    getsockname(fd, reinterpret_cast<sockaddr*>(&w.local), &len);
    for (const auto& [n, id] : w.conns) take_link_source(id, w);
    flush_out(e, fd, w);
    return;
  }
  for (CmId* id : detach_all(e, fd)) {
    if (err == ECONNREFUSED && retry_refused(id)) continue;
    fail_qp(id);
    id->state = IdState::kRouteResolved;
    if (err == ECONNREFUSED)
      post_event(id, RDMA_CM_EVENT_REJECTED, kRejectInvalidServiceId);
    else
      post_event(id, RDMA_CM_EVENT_UNREACHABLE, -err);
  }
}

// A non-blocking connect has an outcome, unless it is still in progress.
void on_connect_finished(Engine& e, int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != EINPROGRESS) on_connect_done(e, fd, err);
}

// A message on link `fd` for connection m.conn.
void dispatch(Engine& e, int fd, Watch& w, const CmMsg& m) {
  auto it = w.conns.find(m.conn);
  if (it != w.conns.end()) return on_message(it->second, m);
  if (!w.active && (m.type == MsgType::kReq || m.type == MsgType::kSidrReq))
    return on_request(e, fd, w, m);
  // A connection that already ended here: a disconnect still gets its answer.
  if (m.type == MsgType::kDreq) {
    CmMsg drep = make_msg(MsgType::kDrep);
    drep.conn = m.conn;
    send_on(e, fd, drep);
  }
}

void on_readable(Engine& e, int fd) {
  Watch& w = e.watches.at(fd);
  if (w.cut) return link_broken(e, fd);
  uint8_t buf[4096];
  bool lost = false;
  // A turn takes at most kReadPerTurn bytes: a peer that floods its link does not hold up
  // the others (the socket stays readable, level-triggered, for the next turn).
  for (size_t taken = 0; taken < kReadPerTurn;) {
    const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      w.in.insert(w.in.end(), buf, buf + n);
      taken += static_cast<size_t>(n);
      // A short read took all there was: what comes later (or the peer's close) leaves the
      // socket readable for the next wait.
      if (static_cast<size_t>(n) < sizeof buf) break;
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) lost = true;
    break;
  }
  // Whole messages first: a peer may send DREQ and close at once. Each may end
  // connections, and the link with the last of them, so the watch is looked up anew.
  size_t used = 0;
  for (auto it = e.watches.find(fd); it != e.watches.end(); it = e.watches.find(fd)) {
    Watch& cur = it->second;
    if (cur.cut) {
      lost = true;
      break;
    }
    if (cur.in.size() - used < sizeof(CmMsg)) {
      cur.in.erase(cur.in.begin(), cur.in.begin() + static_cast<ptrdiff_t>(used));
      break;
    }
    CmMsg m;
    std::memcpy(&m, cur.in.data() + used, sizeof m);
    used += sizeof m;
    if (!valid(m)) {
      SOFTRDMA_DEBUG_LOG("malformed CM message: link closed");
      lost = true;
      break;
    }
    dispatch(e, fd, cur, m);
  }
  if (lost && e.watches.count(fd)) link_broken(e, fd);
}

void on_listener(Engine& e, CmId* listener) {
  for (;;) {
    sockaddr_in peer{};
    socklen_t peer_len = sizeof peer;
    int fd = accept4(listener->sock, reinterpret_cast<sockaddr*>(&peer), &peer_len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    tune_link(fd);
    Watch& w = new_watch(e, fd, kLinkEvents);
    w.accepted_for = listener;
    w.peer = peer;
    socklen_t len = sizeof w.local;
    getsockname(fd, reinterpret_cast<sockaddr*>(&w.local), &len);
    // The request usually follows the connection at once: take it now, not a loop later.
    on_readable(e, fd);
  }
}

// Whatever `fd` has ready (`events`): a connection to accept, a connect that finished,
// room for queued messages, messages.
void serve(Engine& e, int fd, uint32_t events) {
  auto it = e.watches.find(fd);
  if (it == e.watches.end()) return;  // closed while this batch of events was handled
  Watch& w = it->second;
  if (w.listening) return on_listener(e, w.listening);
  if (w.connecting) return on_connect_finished(e, fd);
  if (events & EPOLLOUT) flush_out(e, fd, w);
  if (events & ~EPOLLOUT) on_readable(e, fd);
}

// The CM thread takes the sockets back once no waiter has claimed them for kHandBackAfter;
// returns how long it may sleep before it looks again (-1: until woken).
int hand_back_if_due(Engine& e) {
  if (e.thread_has_sockets || !e.checking) return -1;
  const Clock::time_point now = Clock::now();
  if (e.claimed == 0 && now - e.released_at >= kHandBackAfter) {
    epoll_add(e.epfd, e.sockets, EPOLLIN);
    e.thread_has_sockets = true;
    e.checking = false;
    return -1;
  }
  if (e.claimed != 0 && now - e.claimed_at >= kLongWait) {
    e.checking = false;  // release_sockets wakes the thread
    return -1;
  }
  return static_cast<int>(kHandBackAfter.count());
}

void loop() {
  Engine& e = engine();
  epoll_event events[3];
  for (;;) {
    int timeout = -1;
    {
      std::lock_guard lock(e.mutex);
      e.sleeps_until = Clock::time_point::max();
      if (!e.timers.empty()) {
        auto wait = e.timers.begin()->first - Clock::now();
        timeout = static_cast<int>(
            std::max<int64_t>(0, std::chrono::ceil<std::chrono::milliseconds>(wait).count()));
        e.sleeps_until = e.timers.begin()->first;
      }
      const int check = hand_back_if_due(e);
      if (check >= 0 && (timeout < 0 || check < timeout)) {
        timeout = check;
        e.sleeps_until = Clock::now() + kHandBackAfter;
      }
    }
    const int n = epoll_wait(e.epfd, events, 3, timeout);
    std::lock_guard lock(e.mutex);
    while (!e.timers.empty() && e.timers.begin()->first <= Clock::now()) {
      Timer t = e.timers.begin()->second;
      drop_timer(e, e.timers.begin());
      t.fn(t.id);
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == e.wake_fd) {
        uint64_t count;
        [[maybe_unused]] ssize_t r = read(e.wake_fd, &count, sizeof count);
      } else if (events[i].data.fd == e.route_fd) {
        routes_changed();
      } else if (e.thread_has_sockets) {
        serve_ready_sockets();
      }
    }
  }
}

}  // namespace

int claim_sockets() {
  Engine& e = engine();
  if (e.pid != current_pid()) return -1;
  if (e.claimed++ == 0) {
    e.claimed_at = Clock::now();
    if (e.thread_has_sockets) {
      epoll_ctl(e.epfd, EPOLL_CTL_DEL, e.sockets, nullptr);
      e.thread_has_sockets = false;
    }
  }
  return e.sockets;
}

void serve_ready_sockets() {
  Engine& e = engine();
  epoll_event events[16];
  const int n = epoll_wait(e.sockets, events, 16, 0);
  for (int i = 0; i < n; ++i) serve(e, events[i].data.fd, events[i].events);
}

void release_sockets() {
  Engine& e = engine();
  if (--e.claimed != 0) return;
  e.released_at = Clock::now();
  if (e.checking) return;  // the CM thread looks again within kHandBackAfter
  e.checking = true;
  e.sleeps_until = e.released_at + kHandBackAfter;
  wire::notify_eventfd(e.wake_fd);
}

std::mutex& cm_mutex() {
  return engine().mutex;
}

void watch_listener(CmId* id) {
  Engine& e = engine();
  ensure_started(e);
  new_watch(e, id->sock, EPOLLIN).listening = id;
}

void unwatch(CmId* id) {
  Engine& e = engine();
  // A listener going away: its unanswered requests stay (the application owns those ids)
  // but no longer count against it; the links it accepted take no more requests, and
  // those that carry nothing are closed.
  for (CmId* child : id->pending) child->listener = nullptr;
  id->pending.clear();
  auto listening = e.watches.find(id->sock);
  if (id->sock >= 0 && listening != e.watches.end() && listening->second.listening == id) {
    std::vector<int> idle;
    for (auto& [fd, w] : e.watches) {
      if (w.accepted_for != id) continue;
      w.accepted_for = nullptr;
      if (w.conns.empty()) idle.push_back(fd);
    }
    for (int fd : idle) close_link(e, fd);
    epoll_ctl(e.sockets, EPOLL_CTL_DEL, id->sock, nullptr);
    e.watches.erase(id->sock);  // the caller closes the socket
  }
  leave_link(id, false);
  auto [first, last] = e.timers_of.equal_range(id);
  for (auto i = first; i != last; ++i) e.timers.erase(i->second);
  e.timers_of.erase(first, last);
}

void after(CmId* id, std::chrono::milliseconds delay, std::function<void(CmId*)> fn) {
  Engine& e = engine();
  ensure_started(e);
  const Clock::time_point due = Clock::now() + delay;
  e.timers_of.emplace(id, e.timers.emplace(due, Timer{id, std::move(fn)}));
  if (due >= e.sleeps_until) return;
  e.sleeps_until = due;
  wire::notify_eventfd(e.wake_fd);  // the thread recomputes how long it may sleep
}

void disconnected(CmId* id) {
  leave_link(id, false);
  fail_qp(id);
  id->state = IdState::kDisconnected;
  post_event(id, RDMA_CM_EVENT_DISCONNECTED, 0);
  if (id->rc_qpn)
    after(id, kTimewait, [](CmId* i) { post_event(i, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0); });
}

int start_connect(CmId* id) {
  Engine& e = engine();
  ensure_started(e);
  const LinkKey key = key_of(id);
  if (auto found = e.reusable_links.find(key); found != e.reusable_links.end()) {
    attach(e, id, found->second);
    id->on_reused_link = true;
    const Watch& w = e.watches.at(found->second);
    if (!w.connecting) take_link_source(id, w);
    send_msg(id, id->request);
    return 0;
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  tune_link(fd);
  sockaddr_in src = id->id.route.addr.src_sin;
  src.sin_port = 0;
  // The port is left to connect(): one chosen at bind time comes from the pool that other
  // programs' listeners draw from (bind to port 0), and would take one from them.
  int one = 1;
  setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
  bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src);
  const bool at_once = connect(fd, &id->id.route.addr.dst_addr, sizeof(sockaddr_in)) == 0;
  if (!at_once && errno != EINPROGRESS) {
    const int err = errno;
    close(fd);
    return err;
  }
  // A connection on this host is usually made before connect() returns: the request goes
  // from this thread rather than wake the CM thread to send it.
  pollfd ready{fd, POLLOUT, 0};
  const bool made = at_once || poll(&ready, 1, 0) == 1;
  Watch& w = new_watch(e, fd, made ? kLinkEvents : kLinkEvents | EPOLLOUT);
  w.room_wanted = !made;
  w.active = w.connecting = w.reusable = true;
  w.key = key;
  std::memcpy(&w.peer, &id->id.route.addr.dst_sin, sizeof w.peer);
  e.reusable_links[key] = fd;
  attach(e, id, fd);
  id->on_reused_link = false;
  send_msg(id, id->request);  // queued until the connection is made
  if (made) {
    // Ready with an error (refused) shows as POLLERR; only then is the error worth a call.
    if (ready.revents & (POLLERR | POLLHUP))
      on_connect_finished(e, fd);
    else
      on_connect_done(e, fd, 0);
  }
  return 0;
}

void release_backlog_slot(CmId* id) {
  if (CmId* l = id->listener) {
    --l->pending_requests;
    std::erase(l->pending, id);
  }
  id->listener = nullptr;
}

void fail_qp(CmId* id) {
  if (id->rc_qpn) softrdma_qp_error(id->rc_qpn);
}

bool send_msg(CmId* id, CmMsg m) {
  if (!id->conn) return false;
  m.conn = id->conn;
  return send_on(engine(), id->sock, m);
}

void leave_link(CmId* id, bool tell_peer) {
  if (!id->conn) return;
  Engine& e = engine();
  if (tell_peer) send_msg(id, make_msg(MsgType::kGone));
  auto it = e.watches.find(id->sock);
  const int fd = id->sock;
  const uint32_t conn = id->conn;
  id->sock = -1;
  id->conn = 0;
  if (it == e.watches.end()) return;
  // Both ends key a connection by the number the active side gave it.
  auto& conns = it->second.conns;
  if (auto c = conns.find(conn); c != conns.end() && c->second == id) conns.erase(c);
  retire_if_idle(e, fd);
}

}  // namespace softrdma::cm

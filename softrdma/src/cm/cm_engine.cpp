#include "cm/cm_engine.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "cm/cm_context.hpp"
#include "common/background_thread.hpp"
#include "common/current_pid.hpp"
#include "common/log.hpp"
#include "wire/socket_io.hpp"

namespace softrdma::cm {
namespace {

using Clock = std::chrono::steady_clock;

struct Watch {
  CmId* id = nullptr;        // null: an accepted connection whose request has not arrived
  CmId* listener = nullptr;  // for such connections
  sockaddr_in peer{};        // and where they come from
  bool connecting = false;
  std::vector<uint8_t> in;
  uint64_t serial = 0;  // tells this watch from a later one on a reused descriptor
  int claimed = 0;      // waiters serving it; meanwhile the CM thread does not watch it
};

struct Timer {
  CmId* id;
  std::function<void(CmId*)> fn;
};

struct Engine {
  std::mutex mutex;
  int epfd = -1;
  int wake_fd = -1;  // an eventfd that interrupts epoll_wait when a timer is added
  std::map<int, Watch> watches;
  std::vector<ClaimedSocket> unwatched;  // accepted by a waiter, watched once it is done
  // Sockets that may be in a handshake (in_handshake): what a waiter looks through, rather
  // than every connection. Kept loosely: one found out of its handshake is dropped then.
  std::set<int> handshaking;
  std::multimap<Clock::time_point, Timer> timers;
  // When the thread wakes by itself at the latest: a timer due later needs no wake-up (each
  // rdma_connect adds one, and waking the thread for it would cost the connection a switch).
  Clock::time_point sleeps_until = Clock::time_point::max();
  uint64_t next_serial = 0;
  pid_t pid = 0;
};

Engine& engine() {
  static auto* e = new Engine();
  return *e;
}

void loop();

// Caller holds the mutex. A forked child gets a fresh engine and thread.
void ensure_started(Engine& e) {
  if (e.pid == current_pid()) return;
  e.pid = current_pid();
  e.watches.clear();
  e.handshaking.clear();
  e.timers.clear();
  e.unwatched.clear();
  e.epfd = epoll_create1(EPOLL_CLOEXEC);
  e.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = e.wake_fd;
  epoll_ctl(e.epfd, EPOLL_CTL_ADD, e.wake_fd, &ev);
  start_background_thread("softrdma-cm", loop);
}

// The watch of a descriptor just opened (a number closed before may come back).
Watch& new_watch(Engine& e, int fd) {
  Watch& w = e.watches[fd];
  w = Watch{};
  w.serial = ++e.next_serial;
  e.handshaking.insert(fd);
  return w;
}

void epoll_set(Engine& e, int fd, uint32_t events, bool add) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  epoll_ctl(e.epfd, add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
}

// The addresses of a connection: the local one from the socket, the peer's as accept4 or
// the active side's destination gave it.
void fill_route_addrs(CmId* id, int fd, const sockaddr_in* peer) {
  socklen_t len = sizeof id->id.route.addr.src_storage;
  getsockname(fd, &id->id.route.addr.src_addr, &len);
  if (peer) std::memcpy(&id->id.route.addr.dst_storage, peer, sizeof *peer);
}

void reject_and_close(int fd, int status) {
  CmMsg m = make_msg(MsgType::kRej);
  m.reject_status = static_cast<uint8_t>(status);
  send(fd, &m, sizeof m, MSG_NOSIGNAL);
  close(fd);
}

// A connection request arrived on a listener: a new child id and CONNECT_REQUEST.
void on_request(Engine& e, int fd, CmId* listener, const CmMsg& m) {
  if (listener->state != IdState::kListening ||
      (m.type != MsgType::kReq && m.type != MsgType::kSidrReq)) {
    e.watches.erase(fd);
    close(fd);
    return;
  }
  if (listener->pending_requests >= listener->backlog) {
    e.watches.erase(fd);
    reject_and_close(fd, kRejectConsumer);
    return;
  }
  auto* child = new CmId();
  child->id.channel = listener->id.channel;
  child->channel = listener->channel;
  child->synchronous = listener->synchronous;
  child->id.context = listener->id.context;
  child->id.ps = listener->id.ps;
  child->id.qp_type = listener->id.qp_type;
  attach_to_device(&child->id);
  child->sock = fd;
  child->listener = listener;
  child->peer = m;
  child->local_psn = static_cast<uint32_t>(random()) & 0xffffff;
  child->retry_count = m.retry_count;
  child->rnr_retry_count = m.rnr_retry_count;
  child->state = IdState::kRequested;
  Watch& w = e.watches[fd];
  fill_route_addrs(child, fd, &w.peer);
  ++listener->pending_requests;
  listener->pending.push_back(child);
  w.id = child;
  w.listener = nullptr;
  post_event(child, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &m, listener);
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
        close_connection(id);
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
      id->peer = m;
      close_connection(id);
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
      close_connection(id);
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
    default:
      return;
  }
}

// The peer's end of the connection went away without a word.
void on_connection_lost(CmId* id) {
  const IdState was = id->state;
  close_connection(id);
  switch (was) {
    case IdState::kConnected:
    case IdState::kDisconnecting:
      disconnected(id);
      break;
    case IdState::kConnecting:
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

// The connection is made (err 0) or failed: send the request, or retry or report.
void on_connect_done(Engine& e, CmId* id, int fd, int err) {
  Watch& w = e.watches[fd];
  const bool was_connecting = w.connecting;
  w.connecting = false;
  if (err == ECONNREFUSED && Clock::now() < id->refused_until) {
    close_connection(id);
    after(id, std::chrono::milliseconds(20), [](CmId* i) {
      if (i->state != IdState::kConnecting) return;
      if (int e2 = start_connect(i)) {
        i->state = IdState::kRouteResolved;
        post_event(i, RDMA_CM_EVENT_UNREACHABLE, -e2);
      }
    });
    return;
  }
  if (err == 0 && send_msg(id, id->request)) {
    if (was_connecting) epoll_set(e, fd, EPOLLIN | EPOLLRDHUP, false);
    fill_route_addrs(id, fd, nullptr);
    return;
  }
  close_connection(id);
  fail_qp(id);
  id->state = IdState::kRouteResolved;
  if (err == ECONNREFUSED)
    post_event(id, RDMA_CM_EVENT_REJECTED, kRejectInvalidServiceId);
  else
    post_event(id, RDMA_CM_EVENT_UNREACHABLE, -(err ? err : ECONNRESET));
}

// A non-blocking connect has an outcome, unless it is still in progress.
void on_connect_finished(Engine& e, CmId* id, int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != EINPROGRESS) on_connect_done(e, id, fd, err);
}

void on_readable(Engine& e, int fd) {
  Watch& w = e.watches[fd];
  uint8_t buf[4096];
  bool lost = false;
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      w.in.insert(w.in.end(), buf, buf + n);
      // A short read took all there was: what comes later (or the peer's close) leaves the
      // socket readable for the next wait, which watches it level-triggered.
      if (static_cast<size_t>(n) < sizeof buf) break;
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) lost = true;
    break;
  }
  // Whole messages first: a peer may send DREQ and close at once.
  while (e.watches.count(fd) && e.watches[fd].in.size() >= sizeof(CmMsg)) {
    Watch& cur = e.watches[fd];
    CmMsg m;
    std::memcpy(&m, cur.in.data(), sizeof m);
    cur.in.erase(cur.in.begin(), cur.in.begin() + sizeof m);
    if (!valid(m)) {
      SOFTRDMA_DEBUG_LOG("malformed CM message: connection closed");
      lost = true;
      break;
    }
    if (cur.id)
      on_message(cur.id, m);
    else
      on_request(e, fd, cur.listener, m);
  }
  if (!lost || !e.watches.count(fd)) return;
  Watch gone = e.watches[fd];
  if (gone.id) {
    on_connection_lost(gone.id);
  } else {
    e.watches.erase(fd);
    close(fd);
  }
}

// `by_waiter`: a waiter serving the listener accepts. The CM thread then starts watching the
// connection only when that waiter is done with it, so it does not wake for the request the
// waiter is about to read.
void on_listener(Engine& e, CmId* listener, bool by_waiter) {
  for (;;) {
    sockaddr_in peer{};
    socklen_t peer_len = sizeof peer;
    int fd = accept4(listener->sock, reinterpret_cast<sockaddr*>(&peer), &peer_len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    wire::tune_socket(fd);  // no Nagle: a disconnect must not wait for a delayed ACK
    Watch& w = new_watch(e, fd);
    w.listener = listener;
    w.peer = peer;
    if (by_waiter)
      e.unwatched.push_back({fd, w.serial});
    else
      epoll_set(e, fd, EPOLLIN | EPOLLRDHUP, true);
    // The request usually follows the connection at once: take it now, not a loop later.
    on_readable(e, fd);
    // One connection per wake: the next one, if any, keeps the listener readable.
    if (by_waiter) return;
  }
}

// Whatever `fd` (watched as `w`) has ready: a connection to accept, a connect that
// finished, or messages.
void serve(Engine& e, int fd, Watch& w) {
  CmId* id = w.id;
  if (id && id->state == IdState::kListening && id->sock == fd)
    on_listener(e, id, w.claimed > 0);
  else if (w.connecting)
    on_connect_finished(e, id, fd);
  else
    on_readable(e, fd);
}

void loop() {
  Engine& e = engine();
  epoll_event events[16];
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
    }
    const int n = epoll_wait(e.epfd, events, 16, timeout);
    std::lock_guard lock(e.mutex);
    while (!e.timers.empty() && e.timers.begin()->first <= Clock::now()) {
      Timer t = e.timers.begin()->second;
      e.timers.erase(e.timers.begin());
      t.fn(t.id);
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == e.wake_fd) {
        uint64_t count;
        [[maybe_unused]] ssize_t r = read(fd, &count, sizeof count);
        continue;
      }
      auto it = e.watches.find(fd);
      if (it != e.watches.end()) serve(e, fd, it->second);
    }
  }
}

// The channel the events of a watched socket go to (null: none yet).
const EventChannel* channel_of(const Watch& w) {
  if (w.id) return w.id->channel;
  return w.listener ? w.listener->channel : nullptr;
}

// A socket whose next message is part of setting a connection up or down: a listener, a
// connection whose request has not arrived, or one waiting for a REP, an RTU or a DREP. An
// established connection stays quiet until it ends; the CM thread watches it alone.
bool in_handshake(int fd, const Watch& w) {
  if (!w.id) return w.listener != nullptr;
  switch (w.id->state) {
    case IdState::kListening:
      return w.id->sock == fd;
    case IdState::kConnecting:
    case IdState::kAccepting:
    case IdState::kDisconnecting:
      return true;
    default:
      return false;
  }
}

// The watch `s` names, unless it is gone or a new watch has the same number (closed
// meanwhile).
Watch* still_watched(Engine& e, const ClaimedSocket& s) {
  auto it = e.watches.find(s.fd);
  return it != e.watches.end() && it->second.serial == s.serial ? &it->second : nullptr;
}

}  // namespace

size_t claim_channel_sockets(const EventChannel* ch, ClaimedSocket* out, size_t max) {
  Engine& e = engine();
  if (e.pid != current_pid()) return 0;
  size_t n = 0;
  for (auto it = e.handshaking.begin(); it != e.handshaking.end();) {
    const int fd = *it;
    auto watched = e.watches.find(fd);
    if (watched == e.watches.end() || !in_handshake(fd, watched->second)) {
      it = e.handshaking.erase(it);
      continue;
    }
    ++it;
    const Watch& w = watched->second;
    if (w.connecting || channel_of(w) != ch) continue;
    if (n == max) return max + 1;
    out[n++] = {fd, w.serial};
  }
  for (size_t i = 0; i < n; ++i) {
    Watch& w = e.watches[out[i].fd];
    if (w.claimed++ == 0) epoll_ctl(e.epfd, EPOLL_CTL_DEL, out[i].fd, nullptr);
  }
  return n;
}

void release_channel_sockets(const ClaimedSocket* claimed, size_t n) {
  Engine& e = engine();
  for (size_t i = 0; i < n; ++i) {
    Watch* w = still_watched(e, claimed[i]);
    if (w && --w->claimed == 0) epoll_set(e, claimed[i].fd, EPOLLIN | EPOLLRDHUP, true);
  }
  for (const ClaimedSocket& s : e.unwatched)
    if (still_watched(e, s)) epoll_set(e, s.fd, EPOLLIN | EPOLLRDHUP, true);
  e.unwatched.clear();
}

void serve_socket(const EventChannel* ch, int fd) {
  Engine& e = engine();
  // The socket may have been closed meanwhile, and its number reused.
  auto it = e.watches.find(fd);
  if (it != e.watches.end() && !it->second.connecting && channel_of(it->second) == ch)
    serve(e, fd, it->second);
}

std::mutex& cm_mutex() {
  return engine().mutex;
}

void watch(CmId* id, bool connecting) {
  Engine& e = engine();
  ensure_started(e);
  Watch& w = new_watch(e, id->sock);
  w.id = id;
  w.connecting = connecting;
  epoll_set(e, id->sock, connecting ? EPOLLOUT : (EPOLLIN | EPOLLRDHUP), true);
}

void handshake_started(CmId* id) {
  if (id->sock >= 0) engine().handshaking.insert(id->sock);
}

void unwatch(CmId* id) {
  Engine& e = engine();
  // A listener going away: its unanswered requests stay (the application owns those ids)
  // but no longer count against it; connections whose request has not arrived are closed.
  for (CmId* child : id->pending) child->listener = nullptr;
  id->pending.clear();
  if (id->state == IdState::kListening) {
    for (auto it = e.watches.begin(); it != e.watches.end();) {
      if (!it->second.id && it->second.listener == id) {
        epoll_ctl(e.epfd, EPOLL_CTL_DEL, it->first, nullptr);
        close(it->first);
        it = e.watches.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (id->sock >= 0 && e.watches.erase(id->sock))
    epoll_ctl(e.epfd, EPOLL_CTL_DEL, id->sock, nullptr);
  for (auto it = e.timers.begin(); it != e.timers.end();)
    it = it->second.id == id ? e.timers.erase(it) : std::next(it);
}

void after(CmId* id, std::chrono::milliseconds delay, std::function<void(CmId*)> fn) {
  Engine& e = engine();
  ensure_started(e);
  const Clock::time_point due = Clock::now() + delay;
  e.timers.emplace(due, Timer{id, std::move(fn)});
  if (due >= e.sleeps_until) return;
  e.sleeps_until = due;
  const uint64_t one = 1;  // the thread recomputes how long it may sleep
  [[maybe_unused]] ssize_t n = write(e.wake_fd, &one, sizeof one);
}

void disconnected(CmId* id) {
  close_connection(id);
  fail_qp(id);
  id->state = IdState::kDisconnected;
  post_event(id, RDMA_CM_EVENT_DISCONNECTED, 0);
  if (id->rc_qpn)
    after(id, kTimewait, [](CmId* i) { post_event(i, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0); });
}

int start_connect(CmId* id) {
  id->sock = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (id->sock < 0) return errno;
  wire::tune_socket(id->sock);
  sockaddr_in src = id->id.route.addr.src_sin;
  src.sin_port = 0;
  bind(id->sock, reinterpret_cast<sockaddr*>(&src), sizeof src);
  const bool at_once = connect(id->sock, &id->id.route.addr.dst_addr, sizeof(sockaddr_in)) == 0;
  if (!at_once && errno != EINPROGRESS) {
    const int err = errno;
    close(id->sock);
    id->sock = -1;
    return err;
  }
  // A connection on this host is usually made before connect() returns: send the request
  // from this thread rather than wake the CM thread to do it.
  pollfd ready{id->sock, POLLOUT, 0};
  const bool made = at_once || poll(&ready, 1, 0) == 1;
  watch(id, !made);
  if (made) {
    // Ready with an error (refused) shows as POLLERR; only then is the error worth a call.
    if (ready.revents & (POLLERR | POLLHUP))
      on_connect_finished(engine(), id, id->sock);
    else
      on_connect_done(engine(), id, id->sock, 0);
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

bool send_msg(CmId* id, const CmMsg& m) {
  return id->sock >= 0 && send(id->sock, &m, sizeof m, MSG_NOSIGNAL) == sizeof m;
}

void close_connection(CmId* id) {
  Engine& e = engine();
  if (id->sock >= 0) {
    if (e.watches.erase(id->sock)) epoll_ctl(e.epfd, EPOLL_CTL_DEL, id->sock, nullptr);
    close(id->sock);
    id->sock = -1;
  }
}

}  // namespace softrdma::cm

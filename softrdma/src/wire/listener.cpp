#include "wire/listener.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/background_thread.hpp"
#include "common/current_pid.hpp"
#include "common/log.hpp"
#include "common/softrdma_port.hpp"
#include "wire/arrivals.hpp"
#include "wire/inbound_connection.hpp"
#include "wire/port_holder.hpp"
#include "wire/protocol.hpp"
#include "wire/standby.hpp"

namespace softrdma::wire {
namespace {

using Clock = InboundConnection::Clock;

// Connections that have not proven themselves yet (a request of theirs taken as from a QP's
// peer, engine/connected_peer.hpp): at most this many (the oldest goes when one more
// arrives), each for at most the timeout, and each holding little
// (InboundConnection::kUnprovenInput). Anyone who can reach the port can open them; they
// must not exhaust the process.
constexpr size_t kMaxUnproven = 1024;
constexpr std::chrono::milliseconds kDefaultUnprovenTimeout{10000};
// The loop wakes at least this often to close connections past the timeout.
constexpr int kSweepIntervalMs = 500;
// After answering a READ or an atomic with its data, the loop's thread looks for the next
// request without sleeping for this long: a target that does not poll (an ib_read_lat
// server) would otherwise pay a thread wake-up, some 20 µs here, per request. Bounded, and
// only after such answers (an idle process never spins). Not while applications poll (they
// take what arrives). Not after WRITEs and SENDs: in a ping-pong their acknowledgements ride
// back in requests, and in a stream a thread that looks at once reads it in small pieces
// (one-way ib_write_bw 64 KiB lost 14-19% when every short turn made it look).
constexpr std::chrono::microseconds kLookAfterServing{50};

std::chrono::milliseconds unproven_timeout() {
  const char* env = std::getenv("SOFTRDMA_UNAUTHENTICATED_TIMEOUT_MS");
  const long ms = env ? std::strtol(env, nullptr, 10) : 0;
  return ms > 0 ? std::chrono::milliseconds(ms) : kDefaultUnprovenTimeout;
}

// Every inbound connection of the process, served by one thread asleep in epoll_wait: the
// thread count does not grow with the number of connections.
class ResponderLoop {
 public:
  // Takes the listening socket and the epoll instance, both made before the loop's thread
  // starts: that thread must not need a descriptor the process may have run out of by then.
  ResponderLoop(int listener, int epfd) : listener_(listener), epfd_(epfd) {
    watch(listener_, EPOLLIN, EPOLL_CTL_ADD);
    if (standby_.fd() >= 0) watch(standby_.fd(), EPOLLIN, EPOLL_CTL_ADD);
  }

  [[noreturn]] void run() {
    epoll_event events[64];
    Clock::time_point look_until{};  // see kLookAfterServing
    for (;;) {
      const int n = wait_for_events(events, 64, look_until);
      // Naps holding no lock: the applications serve meanwhile. The events may then be
      // stale, which handle() allows for.
      if (std::any_of(events, events + std::max(n, 0),
                      [&](const epoll_event& e) { return e.data.fd == standby_.fd(); })) {
        // Answers the applications deferred go out at the latest as each nap ends.
        const std::vector<int> arrivals = rest_few_connections();
        standby_.stand_by(arrivals, [this] { send_deferred_answers(false); });
        watch_rested_connections();
      }
      std::lock_guard lock(serving_);
      send_deferred(false);
      const Handled handled = handle(events, n, true);
      const auto now = Clock::now();
      if (handled.served) standby_.thread_took();
      if (handled.answered_with_data) look_until = now + kLookAfterServing;
      close_unproven(now);
      if (listener_rests_until_ && now >= *listener_rests_until_) {
        listener_rests_until_.reset();
        watch(listener_, EPOLLIN, EPOLL_CTL_MOD);
      }
    }
  }

  /// Serves the inbound connections an application's poll found readable, in its thread,
  /// unless the loop's thread is at it (then false: it serves them).
  bool serve_arrived(const Arrivals& arrived) {
    std::unique_lock lock(serving_, std::try_to_lock);
    if (!lock) return false;
    // While the loop's thread stands by, applications poll: the answers (a message back to
    // another host, a system call that also runs that host's receive path) go out at the
    // next poll, after this one has returned what they completed.
    const bool answer_now = !standby_.standing_by();
    bool took = false;
    for (int i = 0; i < arrived.requests; ++i)
      took = serve(arrived.request_fds[i], EPOLLIN, answer_now, true) || took;
    // A poll that reads every connection (arrivals.hpp) mostly finds nothing: only what it
    // took counts toward standing the thread down.
    if (took) standby_.application_took();
    return true;
  }

  /// At the process's exit, after the thread serving them: sends every answer still waiting,
  /// then takes the bytes applications' polls peeked at out of every connection's socket
  /// (see InboundConnection::consume_peeked). Sockets the exit closes must hold no unread
  /// bytes, or the peers see a reset and lose the answers still queued.
  void leave() {
    std::lock_guard lock(serving_);
    send_deferred(true);
    for (auto& [fd, entry] : connections_) entry.connection->consume_peeked();
  }

  /// Hands the answers deferred by applications' polls to their sockets, and the held
  /// acknowledgements that fell due or were carried, unless the loop's thread is at it (and
  /// will). With `wait`, after it, and every held acknowledgement too.
  void send_deferred_answers(bool wait) {
    std::unique_lock lock(serving_, std::defer_lock);
    if (wait)
      lock.lock();
    else if (!lock.try_lock())
      return;
    send_deferred(wait);
  }

 private:
  // Caller holds serving_. The thread woken for these events may find them served already:
  // every socket is non-blocking, so it then reads nothing and sleeps again. Events for the
  // standby are the loop thread's business. Without `answer_now`, the answers wait in
  // deferred_ for send_deferred().
  struct Handled {
    bool served = false;              // an event was for a connection or the listener
    bool answered_with_data = false;  // a READ or an atomic
  };
  Handled handle(const epoll_event* events, int n, bool answer_now) {
    Handled h;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == standby_.fd()) continue;
      h.served = true;
      if (fd == listener_)
        accept_all();
      else
        serve(fd, events[i].events, answer_now, false, &h.answered_with_data);
    }
    return h;
  }

  // The loop's thread sleeps until the next event, sweep, or held acknowledgement due.
  // Until `look_until` it looks without sleeping.
  int wait_for_events(epoll_event* events, int most, Clock::time_point look_until) {
    auto timeout = std::chrono::nanoseconds(std::chrono::milliseconds(kSweepIntervalMs));
    Clock::time_point now = Clock::now();
    {
      std::lock_guard lock(serving_);
      if (!holding_.empty()) {
        const auto until_due = next_held_due() - now;
        timeout = std::clamp<std::chrono::nanoseconds>(until_due, {}, timeout);
      }
    }
    // Ends by the time a held acknowledgement falls due, which the caller then sends.
    const Clock::time_point start = now;
    const uint64_t looks = looks_by_applications.load(std::memory_order_relaxed);
    for (const auto end = std::min(look_until, start + timeout);
         now < end && looks_by_applications.load(std::memory_order_relaxed) == looks;
         now = Clock::now()) {
      const int n = epoll_wait(epfd_, events, most, 0);
      if (n != 0) return n;
    }
    timeout -= std::min<std::chrono::nanoseconds>(timeout, now - start);
    const timespec t{static_cast<time_t>(timeout.count() / 1000000000),
                     static_cast<long>(timeout.count() % 1000000000)};
    const int n = epoll_pwait2(epfd_, events, most, &t, nullptr);
    if (n >= 0 || errno != ENOSYS) return n;
    // Before Linux 5.11: whole milliseconds, rounded up (a held ACK goes a little late).
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(timeout);
    return epoll_wait(epfd_, events, most, static_cast<int>(ms.count()));
  }

  // While the thread stands by, applications read the few connections of a process directly
  // (wire/arrivals.hpp), and the epoll set need not hear of each arrival: every socket in a
  // set costs the sender's CPU a callback per message, under the socket's lock (two across
  // namespaces made a TCP ping-pong 0.3 µs slower one way). So a few connections rest out
  // of the set while the thread stands by, which watches them itself; the listener stays,
  // and so does a connection whose answers wait for room in its socket (see rewatch).
  // Returns what the stand-by watches.
  std::vector<int> rest_few_connections() {
    static_assert(kReadDirectlyAtMost + 1 <= Standby::kMostArrivals);
    std::lock_guard lock(serving_);
    std::vector<int> arrivals{epfd_};
    if (connections_.size() > kReadDirectlyAtMost) return arrivals;
    for (auto& [fd, entry] : connections_) {
      if (entry.watched & EPOLLOUT) continue;
      epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
      entry.resting = true;
      arrivals.push_back(fd);
    }
    return arrivals;
  }

  // Back in the set, as their answers now want them (what waits is reported at once).
  void watch_rested_connections() {
    std::lock_guard lock(serving_);
    for (auto& [fd, entry] : connections_) {
      if (!entry.resting) continue;
      entry.resting = false;
      watch(fd, entry.watched, EPOLL_CTL_ADD);
    }
  }

  // Caller holds serving_.
  Clock::time_point next_held_due() {
    auto due = Clock::time_point::max();
    for (const int fd : holding_)
      if (auto it = connections_.find(fd); it != connections_.end())
        due = std::min(due, it->second.connection->held_due());
    return due;
  }

  // Caller holds serving_. Sends what polls deferred, and the held acknowledgements that were
  // carried (dropped) or fell due (`all`: every one).
  void send_deferred(bool all) {
    for (const int fd : deferred_) serve(fd, EPOLLOUT, true);
    deferred_.clear();
    if (!holding_.empty()) release_held(all);
    count_waiting_answers();
  }

  // Caller holds serving_. Drops the held acknowledgements that were carried and sends those
  // that fell due (`all`: every one). Runs on every look of an application's calls while
  // acknowledgements are held, so it looks at them only if a request carried one since its
  // last look, or one fell due.
  void release_held(bool all) {
    const auto now = Clock::now();
    const uint64_t carried = acks_carried.load(std::memory_order_acquire);
    if (!all && carried == acks_carried_seen_ && now < next_held_due()) return;
    acks_carried_seen_ = carried;
    // Both keep their memory.
    held_before_.swap(holding_);
    for (const int fd : held_before_) {
      auto it = connections_.find(fd);
      if (it == connections_.end()) continue;
      if (!it->second.connection->release_held(now, all)) {
        drop(it);
        continue;
      }
      rewatch(it);
      if (it->second.connection->holds_acks()) holding_.push_back(fd);
    }
    held_before_.clear();
  }

  // Caller holds serving_. Polls look at these counts before taking the lock.
  void count_waiting_answers() {
    deferred_answers.store(deferred_.size(), std::memory_order_relaxed);
    connections_holding_acks.store(holding_.size(), std::memory_order_relaxed);
  }

  struct Entry {
    std::unique_ptr<InboundConnection> connection;
    uint64_t serial;  // tells a reused fd number from the connection that had it
    uint32_t watched;
    bool resting = false;  // out of the set while the thread stands by
  };

  void watch(int fd, uint32_t events, int op) {
    epoll_event e{};
    e.events = events;
    e.data.fd = fd;
    epoll_ctl(epfd_, op, fd, &e);
  }

  void accept_all() {
    for (;;) {
      const int fd = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE) {
          // Out of descriptors (accept says so before it looks for a connection): if one
          // waits, a silent connection makes room for it, else the listener rests until the
          // next sweep (level-triggered, it would wake the loop at once again).
          if (!connection_waiting()) return;
          if (close_oldest_unproven()) continue;
          SOFTRDMA_DEBUG_LOG("accept: %s; new connections wait", std::strerror(errno));
          watch(listener_, 0, EPOLL_CTL_MOD);
          listener_rests_until_ = Clock::now() + std::chrono::milliseconds(kSweepIntervalMs);
          return;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK)
          SOFTRDMA_DEBUG_LOG("accept: %s", std::strerror(errno));
        return;
      }
      const uint64_t serial = ++serials_;
      connections_[fd] = Entry{std::make_unique<InboundConnection>(fd), serial, EPOLLIN};
      watch(fd, EPOLLIN, EPOLL_CTL_ADD);
      watch_for_polls(fd, false);
      waiting_.push_back({fd, serial});
      if (waiting_.size() > kMaxUnproven) close_unproven(Clock::time_point::max());
    }
  }

  // True if bytes arrived or the connection ended. An application's poll
  // (`consume_later`) leaves what it read in the socket until the next read of it, by
  // whichever thread (InboundConnection::peeked_); the loop's thread takes it out, or its
  // socket would stay readable and wake it again.
  // Sets *answered_with_data if it answered a READ or an atomic.
  bool serve(int fd, uint32_t events, bool answer_now, bool consume_later = false,
             bool* answered_with_data = nullptr) {
    auto it = connections_.find(fd);
    if (it == connections_.end()) return false;
    InboundConnection& c = *it->second.connection;
    const uint64_t received_before = c.received();
    const uint64_t data_answers_before = c.data_answers();
    bool ok = true;
    // An error or hang-up is left for the socket calls to report: the events may be stale,
    // read before another thread served the connection, closed it, and accepted a new one
    // on the same number.
    if (events & (EPOLLERR | EPOLLHUP)) events |= EPOLLIN;
    if (events & EPOLLOUT) ok = c.on_writable();
    if (ok && (events & EPOLLIN)) ok = c.on_readable(answer_now, consume_later);
    if (answered_with_data && c.data_answers() != data_answers_before) *answered_with_data = true;
    if (!ok) {
      drop(it);
      return true;
    }
    const bool took = c.received() != received_before;
    if (c.holds_acks()) list_once(holding_, fd);
    if (!answer_now && c.wants_write()) {
      list_once(deferred_, fd);
      return took;  // watched as it was until the answers go out
    }
    rewatch(it);
    return took;
  }

  // Adds `fd` to a list of connections with answers waiting, unless it is there already.
  void list_once(std::vector<int>& list, int fd) {
    if (std::find(list.begin(), list.end(), fd) != list.end()) return;
    list.push_back(fd);
    count_waiting_answers();
  }

  // Read while answers can go out; wait for the socket while they cannot. A resting
  // connection whose answers must wait goes back into the set: the stand-by ends once the
  // set reports its socket writable.
  void rewatch(std::unordered_map<int, Entry>::iterator it) {
    const InboundConnection& c = *it->second.connection;
    Entry& e = it->second;
    const uint32_t wanted = (c.wants_read() ? EPOLLIN : 0u) | (c.wants_write() ? EPOLLOUT : 0u);
    if (wanted == e.watched) return;
    e.watched = wanted;
    if (!e.resting) {
      watch(it->first, wanted, EPOLL_CTL_MOD);
    } else if (wanted & EPOLLOUT) {
      e.resting = false;
      watch(it->first, wanted, EPOLL_CTL_ADD);
    }
  }

  void drop(std::unordered_map<int, Entry>::iterator it) {
    epoll_ctl(epfd_, EPOLL_CTL_DEL, it->first, nullptr);
    unwatch_for_polls(it->first);
    connections_.erase(it);  // closes the socket
  }

  bool connection_waiting() const {
    pollfd p{listener_, POLLIN, 0};
    return poll(&p, 1, 0) == 1;
  }

  // The connection a waiting_ entry names, if it is still open and still silent.
  std::unordered_map<int, Entry>::iterator still_silent(std::pair<int, uint64_t> waiting) {
    auto it = connections_.find(waiting.first);
    if (it == connections_.end() || it->second.serial != waiting.second ||
        it->second.connection->proven())
      return connections_.end();
    return it;
  }

  bool close_oldest_unproven() {
    while (!waiting_.empty()) {
      auto it = still_silent(waiting_.front());
      waiting_.pop_front();
      if (it != connections_.end()) {
        drop(it);
        ++closed_total_;
        return true;
      }
    }
    return false;
  }

  // Closes connections still unproven past the timeout, and the oldest ones while
  // more than the limit wait (`now` = max: only the limit applies).
  void close_unproven(Clock::time_point now) {
    size_t closed = 0;
    while (!waiting_.empty()) {
      auto it = still_silent(waiting_.front());
      if (it != connections_.end()) {
        const bool over_limit = waiting_.size() > kMaxUnproven;
        const bool expired = now != Clock::time_point::max() &&
                             now - it->second.connection->accepted_at() >= unproven_timeout_;
        if (!over_limit && !expired) break;
        drop(it);
        ++closed;
      }
      waiting_.pop_front();
    }
    if (closed) {
      closed_total_ += closed;
      SOFTRDMA_DEBUG_LOG(
          "closed %zu connection(s) that did not prove themselves (%llu so far; limit %zu, timeout "
          "%lld ms)",
          closed, static_cast<unsigned long long>(closed_total_), kMaxUnproven,
          static_cast<long long>(unproven_timeout_.count()));
    }
  }

  std::mutex serving_;            // the loop's thread, or an application thread in serve_arrived()
  Standby standby_;               // the loop thread's, while applications serve every arrival
  std::vector<int> deferred_;     // connections whose answers wait for send_deferred()
  std::vector<int> holding_;      // connections holding acknowledgements back
  std::vector<int> held_before_;  // send_deferred's, kept for its capacity
  uint64_t acks_carried_seen_ = 0;  // acks_carried at send_deferred's last pass over holding_
  const int listener_;
  const int epfd_;
  const std::chrono::milliseconds unproven_timeout_ = unproven_timeout();
  std::unordered_map<int, Entry> connections_;
  std::deque<std::pair<int, uint64_t>> waiting_;  // unproven, in accept order
  uint64_t serials_ = 0;
  uint64_t closed_total_ = 0;
  std::optional<Clock::time_point> listener_rests_until_;  // out of descriptors
};

// The loop of the process that listens. A forked child inherits the pointer and the sockets
// but not the thread: it must not read its parent's connections.
std::atomic<ResponderLoop*> g_loop{nullptr};
std::atomic<pid_t> g_loop_pid{0};

// This process's loop (not one a forked child inherited), or none.
ResponderLoop* own_loop() {
  ResponderLoop* loop = g_loop.load(std::memory_order_acquire);
  return loop && g_loop_pid.load(std::memory_order_relaxed) == current_pid() ? loop : nullptr;
}

void at_exit() {
  const HeldAcks::Totals held = HeldAcks::totals();
  SOFTRDMA_DEBUG_LOG("acknowledgements held back: %llu carried by requests, %llu sent",
                     static_cast<unsigned long long>(held.carried),
                     static_cast<unsigned long long>(held.sent));
  const InboundConnection::LandingTotals landing = InboundConnection::landing_totals();
  SOFTRDMA_DEBUG_LOG("large payloads read straight into place: %llu of %llu",
                     static_cast<unsigned long long>(landing.landed),
                     static_cast<unsigned long long>(landing.large));
  const Standby::Totals reads = Standby::totals();
  SOFTRDMA_DEBUG_LOG(
      "reads that took arrivals: %llu by applications' calls, %llu by the "
      "library's threads",
      static_cast<unsigned long long>(reads.by_applications),
      static_cast<unsigned long long>(reads.by_threads));
  if (ResponderLoop* loop = own_loop()) loop->leave();
}

// The socket bound to this process's port, from its first QP on (hold_listen_port), and
// whether it listens yet; a forked child binds one of its own.
struct HeldPort {
  std::mutex mutex;
  int fd = -1;
  pid_t pid = 0;
  bool listening = false;
};

HeldPort& held_port() {
  static auto* held = new HeldPort;  // never destroyed: the loop serves until the process ends
  return *held;
}

// Caller holds held_port().mutex.
int hold_port_locked(HeldPort& held) {
  if (held.pid == current_pid()) return 0;
  const uint16_t port = listen_port();
  if (port == 0) return 0;  // past the last port: nothing to hold, and no listener
  const int fd = bind_shared_port(port, SOCK_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == EADDRINUSE) {
      const std::optional<uid_t> owner = listener_owner(port);
      char who[48] = "another program";
      if (owner) std::snprintf(who, sizeof who, "user %u", static_cast<unsigned>(*owner));
      SOFTRDMA_NOTICE(
          "TCP port %u, where this user's softrdma serves other hosts, is held by %s: no QP "
          "can be created until it is free (or give every host another SOFTRDMA_PORT)",
          port, who);
    }
    return err;
  }
  held.fd = fd;
  held.pid = current_pid();
  held.listening = false;
  return 0;
}

}  // namespace

int hold_listen_port() {
  HeldPort& held = held_port();
  std::lock_guard lock(held.mutex);
  return hold_port_locked(held);
}

void ensure_listening() {
  HeldPort& held = held_port();
  std::lock_guard lock(held.mutex);
  if (hold_port_locked(held) != 0 || held.fd < 0 || held.listening) return;
  const int fd = held.fd;
  const int epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0 || listen(fd, SOMAXCONN) != 0) {
    SOFTRDMA_DEBUG_LOG("cannot listen on port %u: %s", listen_port(), std::strerror(errno));
    if (epfd >= 0) close(epfd);
    return;  // tried again at the next connection set-up
  }
  held.listening = true;
  // Never destroyed: the loop serves until the process ends.
  auto* loop = new ResponderLoop(fd, epfd);
  g_loop_pid.store(current_pid(), std::memory_order_relaxed);
  g_loop.store(loop, std::memory_order_release);
  start_background_thread("softrdma-serve", [loop] { loop->run(); });
  std::atexit(at_exit);
}

bool serve_arrived_requests(const Arrivals& arrived) {
  if (arrived.requests == 0) return false;
  ResponderLoop* loop = own_loop();
  return loop && loop->serve_arrived(arrived);
}

void send_deferred_answers_now() {
  if (ResponderLoop* loop = own_loop()) loop->send_deferred_answers(false);
}

void send_deferred_answers_before_leaving() {
  // Not judged by the counts: the serving thread completes a request before it lists
  // the answer it holds back, and the application, woken by that completion, may be leaving
  // already. Waiting for the thread's lock waits for the listing.
  if (ResponderLoop* loop = own_loop()) loop->send_deferred_answers(true);
}

}  // namespace softrdma::wire

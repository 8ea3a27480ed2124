#include "wire/link.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include "common/background_thread.hpp"
#include "common/current_pid.hpp"
#include "common/log.hpp"
#include "common/self_connect.hpp"
#include "engine/device_counters.hpp"
#include "engine/iovec_list.hpp"
#include "engine/memory_access.hpp"
#include "wire/arrivals.hpp"
#include "wire/hello.hpp"
#include "wire/socket_io.hpp"

namespace softrdma::wire {
namespace {

constexpr int kConnectTimeoutMs = 1000;
constexpr int kConnectTriesWhileReset = 8;

// Sends this end's hello: the first bytes of the link, ahead of anything else. 0 or an errno.
int send_hello(int fd, uint32_t src_ipv4_be, uint32_t dst_ipv4_be) {
  sockaddr_in own{};
  socklen_t length = sizeof own;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&own), &length) != 0) return errno;
  const Hello ours =
      hello_of(Role::kLink, src_ipv4_be ? src_ipv4_be : own.sin_addr.s_addr, dst_ipv4_be);
  // A new socket takes 32 bytes at once.
  if (send(fd, &ours, sizeof ours, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof ours))
    return errno ? errno : EPIPE;
  return 0;
}

// A connected socket to the host and port, from `src_ipv4_be` (0: any), its hello sent; or -1
// with errno set.
int connect_once(uint32_t src_ipv4_be, uint32_t ipv4_be, uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  // From the QP's own GID, as a NIC sends: the peer checks that requests come from the host
  // its QP is connected to. The port is left to connect(), as for any client: one chosen at
  // bind time would be taken from the pool the listeners of other programs draw theirs from.
  a.sin_addr.s_addr = src_ipv4_be;
  int one = 1;
  if (src_ipv4_be) setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
  if (src_ipv4_be && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  a.sin_port = htons(port);
  a.sin_addr.s_addr = ipv4_be;
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  int err = rc == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    socklen_t len = sizeof err;
    if (poll(&p, 1, kConnectTimeoutMs) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
      err = ETIMEDOUT;
  }
  if (err == 0 && connected_to_itself(fd)) {  // a peer gone from this host: nobody there
    reset_on_close(fd);
    err = ECONNREFUSED;
  }
  if (err == 0) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    tune_data_socket(fd);
    err = send_hello(fd, src_ipv4_be, ipv4_be);
  }
  if (err != 0) {
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

// A connection reset as soon as it is made was most likely queued at a listener that then
// closed: a process of the peer's user that ended, while others of the user serve the port
// (SO_REUSEPORT). The next one lands in a listener that is open, so it is made again.
int connect_to(uint32_t src_ipv4_be, uint32_t ipv4_be, uint16_t port) {
  for (int tries = 1;; ++tries) {
    const int fd = connect_once(src_ipv4_be, ipv4_be, port);
    if (fd >= 0 || errno != ECONNRESET || tries == kConnectTriesWhileReset) return fd;
  }
}

// Every link of this process, by destination (never destroyed: verbs called from other
// threads may still reach it while exit() runs).
struct Links {
  std::mutex mutex;
  // By source address, destination address and port.
  std::map<std::tuple<uint32_t, uint32_t, uint16_t>, std::shared_ptr<Link>> by_destination;
  pid_t pid = 0;  // a forked child does not share its parent's connections
};

Links& links() {
  static auto* all = new Links;
  return *all;
}

}  // namespace

std::shared_ptr<Link> Link::to(uint32_t src_ipv4_be, uint32_t ipv4_be, uint16_t port) {
  if (port == 0) return nullptr;
  Links& l = links();
  std::lock_guard lock(l.mutex);
  if (l.pid != current_pid()) {
    l.by_destination.clear();
    l.pid = current_pid();
  }
  const std::tuple destination{src_ipv4_be, ipv4_be, port};
  if (auto it = l.by_destination.find(destination);
      it != l.by_destination.end() && it->second->alive())
    return it->second;
  int fd = connect_to(src_ipv4_be, ipv4_be, port);
  if (fd < 0) return nullptr;
  std::shared_ptr<Link> link(new Link(fd, ipv4_be, port));
  link->self_ = link;
  l.by_destination[destination] = link;
  open_links.store(l.by_destination.size(), std::memory_order_relaxed);
  watch_for_polls(fd, true);
  start_background_thread("softrdma-reader", [link] { read_loop(link); });
  return link;
}

bool Link::take_arrived_responses_now() {
  Links& l = links();
  // Copied out first: handling an answer may retransmit, which looks a link up. Every link:
  // a reader standing by counts on applications' looks reaching its socket (standby.hpp).
  // (An allocation beside the recv per link that follows.)
  std::vector<std::shared_ptr<Link>> taken;
  {
    std::unique_lock lock(l.mutex, std::try_to_lock);
    if (!lock || l.pid != current_pid()) return false;
    for (auto& [destination, link] : l.by_destination)
      if (link->alive()) taken.push_back(link);
  }
  bool handled = false;
  for (const std::shared_ptr<Link>& each : taken) {
    Link& link = *each;
    std::unique_lock reading(link.read_mutex_, std::try_to_lock);
    if (!reading || link.quiet_.skip_this_look()) continue;
    bool handled_here = false;
    const uint64_t read_before = link.bytes_read_;
    const bool open = link.take_responses(handled_here);
    link.quiet_.read(link.bytes_read_ != read_before);
    if (!open) {
      reading.unlock();
      link.shut();  // wakes the reader, which reports the link down
    }
    if (handled_here) {
      link.standby_.application_took();
      handled = true;
    }
  }
  return handled;
}

uint64_t Link::progress() const {
  tcp_info info{};
  socklen_t length = sizeof info;
  if (getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return 0;
  return info.tcpi_bytes_acked + info.tcpi_bytes_received;
}

Link::~Link() {
  unwatch_for_polls(fd_);
  close(fd_);
}

void Link::shut() {
  std::lock_guard lock(write_mutex_);
  shut_holding_lock();
}

void Link::shut_holding_lock() {
  if (alive_.exchange(false)) shutdown(fd_, SHUT_RDWR);
  backlog_.clear();
  {
    std::lock_guard borrowing(borrow_mutex_);
    writing_ = Outgoing();
    borrowing_.store(0, std::memory_order_relaxed);
  }
  backlog_ready_.notify_all();
}

void Link::stop_borrowing() {
  if (borrowing_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(write_mutex_);
  std::lock_guard borrowing(borrow_mutex_);
  for (Outgoing& waiting : backlog_) waiting.own_the_rest();
  writing_.own_the_rest();
  borrowing_.store(0, std::memory_order_release);
}

void Link::queue(const iovec* iov, int count, size_t offset, int first_borrowed) {
  Outgoing& waiting = backlog_.emplace_back(iov, count, offset, first_borrowed);
  if (waiting.borrows()) borrowing_.fetch_add(1, std::memory_order_relaxed);
  if (!flusher_started_) {
    flusher_started_ = true;
    start_background_thread("softrdma-writer", [link = self_.lock()] { flush_loop(link); });
  }
  backlog_ready_.notify_one();
}

Link::Sent Link::send(const Request& header, const iovec* payload, int count, bool may_borrow) {
  // Smaller payloads are copied: borrowing saves little there and costs the bookkeeping.
  constexpr size_t kBorrowedAtLeast = size_t{16} << 10;
  constexpr int kMaxIov = 1 + kMaxSge;
  iovec iov[kMaxIov];  // the header and at most kMaxSge gathered buffers
  int n = 0;
  iov[n++] = iovec{const_cast<Request*>(&header), sizeof header};
  for (int i = 0; i < count && n < kMaxIov; ++i) iov[n++] = payload[i];
  const int first_borrowed = may_borrow && header.payload_len >= kBorrowedAtLeast ? 1 : n;
  std::lock_guard lock(write_mutex_);
  if (!alive()) return Sent::kFailed;
  // Nothing goes out before the listener proved to be one (take_hello): until then, the
  // writer thread holds it back.
  if (!backlog_.empty() || flushing_ || !greeted()) {  // behind bytes already waiting
    queue(iov, n, 0, first_borrowed);
    return Sent::kQueued;
  }
  const ssize_t sent = write_now(fd_, iov, n);
  if (sent < 0) {
    shut_holding_lock();
    return Sent::kFailed;
  }
  if (static_cast<size_t>(sent) < iov_bytes(iov, n))
    queue(iov, n, static_cast<size_t>(sent), first_borrowed);
  return static_cast<size_t>(sent) >= sizeof header ? Sent::kHeaderNow : Sent::kQueued;
}

bool Link::write_out() {
  for (;;) {
    {
      std::lock_guard borrowing(borrow_mutex_);
      iovec iov[1 + kMaxSge];
      const int n = writing_.unsent(iov, 1 + kMaxSge);
      if (n == 0) return true;
      const bool borrowed_before = writing_.borrows();
      const ssize_t sent = write_now(fd_, iov, n);
      if (sent < 0) return false;
      writing_.advance(static_cast<size_t>(sent));
      if (borrowed_before && !writing_.borrows())
        borrowing_.fetch_sub(1, std::memory_order_relaxed);
      if (sent > 0) continue;
    }
    // Full: wait for room holding no lock (shut() wakes this with a shutdown).
    pollfd p{fd_, POLLOUT, 0};
    if (poll(&p, 1, -1) < 0 && errno != EINTR) return false;
    if (!alive()) return false;
  }
}

void Link::flush_loop(std::shared_ptr<Link> self) {
  std::unique_lock lock(self->write_mutex_);
  for (;;) {
    self->backlog_ready_.wait(
        lock, [&] { return (!self->backlog_.empty() && self->greeted()) || !self->alive(); });
    if (!self->alive()) return;
    {
      std::lock_guard borrowing(self->borrow_mutex_);
      self->writing_ = std::move(self->backlog_.front());
    }
    self->backlog_.pop_front();
    self->flushing_ = true;
    lock.unlock();
    const bool ok = self->write_out();
    lock.lock();
    self->flushing_ = false;
    if (!ok) {
      self->shut_holding_lock();
      return;
    }
  }
}

void Link::expect_listener(const Identity& identity) {
  std::lock_guard lock(write_mutex_);
  if (!expected_) expected_ = identity;
}

bool Link::take_hello() {
  Hello theirs;
  std::memcpy(&theirs, input_.data(), sizeof theirs);
  const char* problem = hello_problem(theirs, Role::kListener);
  std::lock_guard lock(write_mutex_);
  if (!*problem && expected_ && *expected_ != theirs.identity)
    problem =
        "it is not the listener that served this host's QPs there before (another user "
        "holds the port?)";
  if (*problem) {
    count(Counter::kBadHellos);
    char where[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &ipv4_be_, where, sizeof where);
    SOFTRDMA_NOTICE("not using port %u of %s: %s", port_, where, problem);
    return false;
  }
  listener_identity_ = theirs.identity;
  greeted_.store(true, std::memory_order_release);
  backlog_ready_.notify_all();  // what waited for the hello goes out
  return true;
}

bool Link::take_responses(bool& handled) {
  // Bytes asked of the socket per read, and most asked while a large answer arrives.
  constexpr size_t kReadChunk = size_t{64} << 10;
  constexpr size_t kLargeRead = size_t{4} << 20;
  // Reads per call, so an application's poll returns.
  constexpr int kReads = 16;
  if (broken_) return false;
  for (int reads = 0; reads < kReads; ++reads) {
    size_t want = kReadChunk;
    if (greeted() && filled_ >= sizeof(Response)) {
      Response h;
      std::memcpy(&h, input_.data(), sizeof h);
      if (valid(h) && sizeof h + h.payload_len > filled_)
        want = std::clamp(sizeof h + h.payload_len - filled_, kReadChunk, kLargeRead);
    }
    if (input_.size() < filled_ + want) input_.resize(filled_ + want);
    const ssize_t r = recv_now(fd_, input_.data() + filled_, want, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (r <= 0) {  // closed by the peer, or failed
      broken_ = true;
      return false;
    }
    filled_ += static_cast<size_t>(r);
    bytes_read_ += static_cast<uint64_t>(r);
    size_t used = 0;
    if (!greeted()) {
      if (filled_ < sizeof(Hello)) continue;
      if (!take_hello()) {
        broken_ = true;
        return false;
      }
      used = sizeof(Hello);
    }
    while (filled_ - used >= sizeof(Response)) {
      Response h;
      std::memcpy(&h, input_.data() + used, sizeof h);
      if (!valid(h)) {
        SOFTRDMA_DEBUG_LOG("malformed response from a peer: connection closed");
        broken_ = true;
        return false;
      }
      if (filled_ - used < sizeof h + h.payload_len) break;
      on_response(*this, h, std::span<const char>(input_.data() + used + sizeof h, h.payload_len));
      used += sizeof h + h.payload_len;
      handled = true;
    }
    std::memmove(input_.data(), input_.data() + used, filled_ - used);
    filled_ -= used;
    if (static_cast<size_t>(r) < want) return true;  // the socket is empty
  }
  return true;
}

void Link::read_loop(std::shared_ptr<Link> self) {
  for (;;) {
    pollfd p[2] = {{self->fd_, POLLIN, 0}, {self->standby_.fd(), POLLIN, 0}};
    if (poll(p, 2, -1) < 0 && errno != EINTR) break;
    if (p[1].revents != 0) self->standby_.stand_by(std::span(&self->fd_, 1));
    std::lock_guard reading(self->read_mutex_);
    bool handled = false;
    if (!self->take_responses(handled)) break;
    if (handled) self->standby_.thread_took();
  }
  self->shut();
  on_link_down(*self);
}

}  // namespace softrdma::wire

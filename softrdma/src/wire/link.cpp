#include "wire/link.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include "common/current_pid.hpp"
#include "common/log.hpp"
#include "engine/memory_access.hpp"
#include "wire/socket_io.hpp"

namespace softrdma::wire {
namespace {

constexpr int kConnectTimeoutMs = 1000;

int connect_to(uint32_t ipv4_be, uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = ipv4_be;
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    if (poll(&p, 1, kConnectTimeoutMs) == 1 &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
      rc = 0;
  }
  if (rc != 0) {
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  tune_socket(fd);
  return fd;
}

}  // namespace

std::shared_ptr<Link> Link::to(uint32_t ipv4_be, uint16_t port) {
  if (port == 0) return nullptr;
  static std::mutex mutex;
  // Never destroyed: verbs called from other threads may still reach it while exit() runs.
  static auto& links = *new std::map<std::pair<uint32_t, uint16_t>, std::shared_ptr<Link>>();
  static pid_t links_pid = 0;
  std::lock_guard lock(mutex);
  if (links_pid != current_pid()) {  // a forked child does not share its parent's connections
    links.clear();
    links_pid = current_pid();
  }
  const std::pair destination{ipv4_be, port};
  if (auto it = links.find(destination); it != links.end() && it->second->alive())
    return it->second;
  int fd = connect_to(ipv4_be, port);
  if (fd < 0) return nullptr;
  std::shared_ptr<Link> link(new Link(fd));
  link->self_ = link;
  links[destination] = link;
  std::thread(read_loop, link).detach();
  return link;
}

Link::~Link() {
  close(fd_);
}

void Link::shut() {
  std::lock_guard lock(write_mutex_);
  shut_holding_lock();
}

void Link::shut_holding_lock() {
  if (alive_.exchange(false)) shutdown(fd_, SHUT_RDWR);
  backlog_.clear();
  backlog_ready_.notify_all();
}

void Link::queue(const iovec* iov, int count, size_t offset) {
  std::vector<char>& bytes = backlog_.emplace_back();
  for (int i = 0; i < count; ++i) {
    const size_t skip = std::min(offset, iov[i].iov_len);
    offset -= skip;
    const char* base = static_cast<const char*>(iov[i].iov_base);
    bytes.insert(bytes.end(), base + skip, base + iov[i].iov_len);
  }
  if (!flusher_started_) {
    flusher_started_ = true;
    std::thread(flush_loop, self_.lock()).detach();
  }
  backlog_ready_.notify_one();
}

bool Link::send(const Request& header, const iovec* payload, int count) {
  constexpr int kMaxIov = 1 + kMaxSge;
  iovec iov[kMaxIov];  // the header and at most kMaxSge gathered buffers
  int n = 0;
  iov[n++] = iovec{const_cast<Request*>(&header), sizeof header};
  for (int i = 0; i < count && n < kMaxIov; ++i) iov[n++] = payload[i];
  std::lock_guard lock(write_mutex_);
  if (!alive()) return false;
  if (!backlog_.empty() || flushing_) {  // behind bytes already waiting
    queue(iov, n, 0);
    return true;
  }
  const ssize_t sent = write_now(fd_, iov, n);
  if (sent < 0) {
    shut_holding_lock();
    return false;
  }
  if (static_cast<size_t>(sent) < iov_bytes(iov, n)) queue(iov, n, static_cast<size_t>(sent));
  return true;
}

void Link::flush_loop(std::shared_ptr<Link> self) {
  std::unique_lock lock(self->write_mutex_);
  for (;;) {
    self->backlog_ready_.wait(lock, [&] { return !self->backlog_.empty() || !self->alive(); });
    if (!self->alive()) return;
    std::deque<std::vector<char>> taken;
    taken.swap(self->backlog_);
    self->flushing_ = true;
    lock.unlock();
    bool ok = true;
    for (std::vector<char>& bytes : taken) {
      iovec iov{bytes.data(), bytes.size()};
      if (!(ok = write_all(self->fd_, &iov, 1))) break;
    }
    lock.lock();
    self->flushing_ = false;
    if (!ok) {
      self->shut_holding_lock();
      return;
    }
  }
}

void Link::read_loop(std::shared_ptr<Link> self) {
  std::vector<char> payload;
  for (;;) {
    Response r;
    if (!read_all(self->fd_, &r, sizeof r)) break;
    if (!valid(r)) {
      SOFTRDMA_DEBUG_LOG("malformed response from a peer: connection closed");
      break;
    }
    payload.resize(r.payload_len);
    if (r.payload_len && !read_all(self->fd_, payload.data(), r.payload_len)) break;
    on_response(*self, r, payload);
  }
  self->shut();
  on_link_down(*self);
}

}  // namespace softrdma::wire

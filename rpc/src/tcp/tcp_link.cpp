// The TCP link: the send buffer, the frame parser and its checks, and the end of the
// connection (see tcp_link.hpp).
#include "tcp/tcp_link.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "rdmakit/rpc/status.hpp"

namespace rdmakit::rpc::detail {
namespace {

// Reads go into chunks of this size (and into a frame's own chunk when it is larger).
constexpr size_t kChunkBytes = 64 * 1024;
// A drained send buffer larger than this is freed: a large message leaves no large buffer.
constexpr size_t kKeptSendCapacity = 1024 * 1024;

bool transient(int error) noexcept {
  return error == EAGAIN || error == EWOULDBLOCK || error == EINTR;
}

}  // namespace

std::unique_ptr<Link> TcpLink::open(int fd, LinkLimits limits, bool awaits_hello,
                                    std::error_code& error) {
  const int wake_fd = epoll_create1(EPOLL_CLOEXEC);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = fd;
  if (wake_fd < 0 || epoll_ctl(wake_fd, EPOLL_CTL_ADD, fd, &event) != 0) {
    error = std::error_code(errno, std::system_category());
    if (wake_fd >= 0) close(wake_fd);
    close(fd);
    return nullptr;
  }
  return std::make_unique<TcpLink>(fd, wake_fd, limits, awaits_hello);
}

TcpLink::TcpLink(int fd, int wake_fd, LinkLimits limits, bool awaits_hello)
    : fd_(fd),
      wake_fd_(wake_fd),
      hello_missing_(awaits_hello ? sizeof(TcpHello) : 0),
      in_(kChunkBytes) {
  limits_ = limits;
}

TcpLink::~TcpLink() {
  close(wake_fd_);
  close(fd_);
}

void TcpLink::shut_down() {
  shutdown(fd_, SHUT_RDWR);
}

std::byte* TcpLink::begin(Channel, FrameHeader& header) {
  if (failure()) return nullptr;
  // The vector is sized here, before the payload pointer is handed out, and not touched
  // again until commit(). Its new bytes are zero: the padding goes out as zeros. A frame
  // begun and never committed is overwritten.
  out_.resize(committed_);
  out_.resize(committed_ + frame_bytes(header.length));
  std::byte* at = out_.data() + committed_;
  std::memcpy(at, &header, sizeof header);
  return at + sizeof header;
}

void TcpLink::commit(Channel) {
  committed_ = out_.size();
}

void TcpLink::send_pending() {
  if (sent_ == committed_ || closed_ || failure_) return;
  const ssize_t n = ::send(fd_, out_.data() + sent_, committed_ - sent_, MSG_NOSIGNAL);
  if (n < 0) {
    if (!transient(errno)) closed_ = make_error_code(Errc::session_closed);
    return;
  }
  sent_ += static_cast<size_t>(n);
  if (sent_ == committed_) {
    out_.clear();
    if (out_.capacity() > kKeptSendCapacity) out_.shrink_to_fit();
    sent_ = committed_ = 0;
  } else if (sent_ >= committed_ - sent_) {
    // Under steady load the buffer may never drain: drop the sent prefix once it is at least
    // as long as the rest, so each byte is moved at most once on average.
    out_.erase(out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(sent_));
    committed_ -= sent_;
    sent_ = 0;
  }
}

int TcpLink::receive(FrameSink& sink, int budget) {
  send_pending();  // the rest of a flush the socket did not take at once
  if (hello_missing_ > 0 && !read_hello()) return 0;
  int delivered = deliver(sink, budget);
  // A peer that sends but does not read would make our output grow without end: honest
  // traffic never has more unsent than a window of requests and one of replies, so beyond
  // that stop reading (TCP then holds the peer back).
  const uint64_t most_unsent =
      2 * uint64_t{limits_.window} * (frame_bytes(limits_.max_message_bytes) + sizeof(FrameHeader));
  bool more = committed_ - sent_ <= most_unsent;
  while (more && delivered < budget && !failure_ && !closed_) {
    more = read_some();
    delivered += deliver(sink, budget - delivered);
  }
  return delivered;
}

void TcpLink::set_sleeping(bool sleeping) {
  const bool want_room = sleeping && sent_ != committed_ && !closed_ && !failure_;
  if (want_room == waking_for_room_) return;
  epoll_event event{};
  event.events = want_room ? EPOLLIN | EPOLLOUT : EPOLLIN;
  event.data.fd = fd_;
  epoll_ctl(wake_fd_, EPOLL_CTL_MOD, fd_, &event);
  waking_for_room_ = want_room;
}

void TcpLink::refuse_peer() {
  failure_ = make_error_code(Errc::protocol_error);
  shutdown(fd_, SHUT_RDWR);  // the peer learns at once, not when the link is destroyed
}

bool TcpLink::read_hello() {
  if (failure_ || closed_) return false;
  // Exactly the hello: frames follow it, and must land 16-byte aligned in the chunks.
  const ssize_t n = ::recv(fd_, hello_.data() + hello_.size() - hello_missing_, hello_missing_, 0);
  if (n <= 0) {
    if (n == 0 || !transient(errno)) closed_ = make_error_code(Errc::session_closed);
    return false;
  }
  hello_missing_ -= static_cast<size_t>(n);
  if (hello_missing_ > 0) return false;
  TcpHello peer;
  std::memcpy(&peer, hello_.data(), sizeof peer);
  if (compatible(peer)) return true;
  refuse_peer();
  return false;
}

int TcpLink::deliver(FrameSink& sink, int budget) {
  int delivered = 0;
  while (delivered < budget && !failure_) {
    const std::span<const std::byte> unparsed = in_.unparsed();
    if (unparsed.size() < sizeof(FrameHeader)) break;
    const FrameHeader h = read_header(unparsed.data());
    if (!valid_kind(h.kind) || h.flags != 0 || h.length > limits_.max_message_bytes) {
      refuse_peer();
      break;
    }
    const size_t bytes = frame_bytes(h.length);
    if (unparsed.size() < bytes) break;
    const uint64_t cookie = in_.take(bytes);
    ++delivered;
    sink.on_frame(h, unparsed.subspan(sizeof(FrameHeader), h.length), cookie);
  }
  return delivered;
}

bool TcpLink::read_some() {
  // deliver() stopped at an incomplete frame and has checked its header if it arrived, so
  // its length is within the limit before a chunk of that size is made.
  const std::span<const std::byte> unparsed = in_.unparsed();
  const size_t wanted = unparsed.size() < sizeof(FrameHeader)
                            ? sizeof(FrameHeader)
                            : frame_bytes(read_header(unparsed.data()).length);
  const std::span<std::byte> space = in_.space_for(wanted);
  const ssize_t n = ::recv(fd_, space.data(), space.size(), 0);
  if (n > 0) {
    in_.filled(static_cast<size_t>(n));
    return static_cast<size_t>(n) == space.size();  // a full read: more may wait
  }
  if (n == 0 || !transient(errno)) closed_ = make_error_code(Errc::session_closed);
  return false;
}

void TcpLink::release(Channel, uint64_t cookie) {
  in_.release(cookie);
}

std::error_code TcpLink::failure() const {
  if (failure_) return failure_;
  return has_input() ? std::error_code() : closed_;
}

bool TcpLink::has_input() const {
  // A truncated frame left at the end of the connection does not count: it is dropped.
  const std::span<const std::byte> unparsed = in_.unparsed();
  return unparsed.size() >= sizeof(FrameHeader) &&
         unparsed.size() >= frame_bytes(read_header(unparsed.data()).length);
}

}  // namespace rdmakit::rpc::detail

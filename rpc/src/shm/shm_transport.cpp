// shm://NAME: sessions between processes of one host. The server listens on a Unix socket
// in an owner-only directory; a client creates the session's rings in a memory file sealed
// against shrinking (see ring/segment.hpp) and passes it over the socket with its hello, so
// connecting needs no answer from the server (it maps the file when it next polls, after
// checking it). The socket stays open
// for the session's life: it carries wake-ups to a sleeping peer and the memory files of
// out-of-line payloads, and its end tells that the peer process died.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>

#include "core/engine.hpp"
#include "core/transports.hpp"
#include "ring/ring_link.hpp"
#include "shm/unix_socket.hpp"

namespace rdmakit::rpc::detail {
namespace {

constexpr uint64_t kHelloMagic = 0x316d68732d6b72;  // "rk-shm1"
// The largest ring a client may ask for.
constexpr uint32_t kMaxRingBytes = 1u << 30;

struct Hello {
  uint64_t magic;
  uint32_t ring_bytes;
  uint32_t window;
  uint32_t max_message_bytes;
  uint32_t color;
};

// Socket messages after the welcome: a wake-up, or an out-of-line payload's memory file.
enum class Note : uint8_t { wake = 'w', payload = 'p' };
struct PayloadNote {
  Note note;
  uint8_t unused[7];
  uint64_t ref;
};

std::error_code errno_code() noexcept {
  return {errno, std::system_category()};
}

class ShmPeer final : public RingPeer {
 public:
  ShmPeer(int socket, uint32_t window, uint32_t max_message_bytes)
      : socket_(socket),
        max_files_(out_of_line_slots(window)),
        largest_file_(largest_out_of_line_buffer(max_message_bytes)) {}
  ~ShmPeer() override {
    for (const std::deque<File>& queue : files_) {
      for (const File& f : queue) close(f.fd);
    }
    close(socket_);
  }

  void published(bool peer_sleeping) override {
    if (!peer_sleeping) return;
    const Note wake = Note::wake;
    send_message(socket_, &wake, sizeof wake, -1);  // full socket: a wake-up is pending anyway
  }
  std::error_code check_alive() override {
    drain();
    return gone_;
  }
  int wait_fd() const override { return socket_; }
  void woke() override { drain(); }

  std::byte* create_buffer(size_t bytes, uint64_t& handle) override {
    const int fd = memfd_create("rdmakit-rpc-payload", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return nullptr;
    // Sealed so that the peer's mapping can never lose its pages under it.
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      close(fd);
      return nullptr;
    }
    void* at = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (at == MAP_FAILED) {
      close(fd);
      return nullptr;
    }
    handle = static_cast<uint64_t>(fd);
    return static_cast<std::byte*>(at);
  }
  void destroy_buffer(std::byte* data, size_t bytes, uint64_t handle) override {
    munmap(data, bytes);
    close(static_cast<int>(handle));
  }
  bool announce_buffer(uint64_t handle, uint32_t tag) override {
    const PayloadNote note{Note::payload, {}, tag};
    return send_message(socket_, &note, sizeof note, static_cast<int>(handle));
  }
  std::span<const std::byte> adopt_buffer(uint32_t tag, uint64_t, size_t min_bytes) override {
    // The sender passed the file before publishing the frame: it is in the socket already.
    drain();
    std::deque<File>& queue = files_[OutOfLineTag::decode(tag).channel];
    if (queue.empty() || queue.front().ref != tag) return {};
    const int fd = queue.front().fd;
    queue.pop_front();
    struct stat st {};
    const int seals = fcntl(fd, F_GET_SEALS);
    void* at = MAP_FAILED;
    if (fstat(fd, &st) == 0 && seals >= 0 && (seals & F_SEAL_SHRINK) != 0 &&
        static_cast<size_t>(st.st_size) >= min_bytes &&
        static_cast<size_t>(st.st_size) <= largest_file_) {
      at = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED | MAP_POPULATE, fd,
                0);
    }
    close(fd);
    if (at == MAP_FAILED) return {};
    return {static_cast<const std::byte*>(at), static_cast<size_t>(st.st_size)};
  }
  void drop_buffer(std::span<const std::byte> buffer) override {
    munmap(const_cast<std::byte*>(buffer.data()), buffer.size());
  }

 private:
  struct File {
    uint64_t ref;
    int fd;
  };
  // Takes every message waiting on the socket: wake-ups are dropped, payload files queued.
  void drain() {
    for (;;) {
      PayloadNote note{};
      int fd = -1;
      const ssize_t n = receive_message(socket_, &note, sizeof note, fd);
      if (n == 0) {
        gone_ = make_error_code(Errc::session_closed);
        return;
      }
      if (n < 0) {
        if (errno != EAGAIN && errno != EINTR) gone_ = errno_code();
        return;
      }
      std::deque<File>& queue =
          files_[OutOfLineTag::decode(static_cast<uint32_t>(note.ref)).channel];
      if (note.note == Note::payload && fd >= 0 && queue.size() < max_files_) {
        queue.push_back({note.ref, fd});
      } else if (fd >= 0) {
        close(fd);  // not announced as a payload, or more than the window allows
      }
    }
  }

  int socket_;
  size_t max_files_;           // per ring: no more than its slots
  size_t largest_file_;        // no larger than the largest message needs
  std::deque<File> files_[2];  // by the ring (Channel) the buffer belongs to
  std::error_code gone_;
};

class ShmListener final : public Listener {
 public:
  ShmListener(int socket, std::string path, std::string url, const Options& options)
      : socket_(socket), path_(std::move(path)), url_(std::move(url)), options_(options) {}
  ~ShmListener() override {
    close(socket_);
    unlink(path_.c_str());
  }

  std::unique_ptr<Link> accept() override {
    // Clients whose hello has not arrived yet are kept (without blocking) for a while.
    const auto now = std::chrono::steady_clock::now();
    for (;;) {
      const int s = accept4(socket_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (s < 0) break;
      early_.push_back({s, now + options_.connect_timeout});
    }
    for (size_t n = early_.size(); n > 0; --n) {  // each waiting one looked at once
      Early e = early_.front();
      early_.pop_front();
      bool waiting = false;
      if (std::unique_ptr<Link> link = greet(e.socket, waiting)) return link;
      if (waiting && now < e.give_up) {
        early_.push_back(e);
      } else {
        close(e.socket);
      }
    }
    return nullptr;
  }
  int wait_fd() const override { return socket_; }
  const std::string& url() const override { return url_; }

 private:
  struct Early {
    int socket;
    std::chrono::steady_clock::time_point give_up;
  };

  // The client's hello and memory file, checked; nullptr (and `waiting` when it may still come).
  std::unique_ptr<Link> greet(int s, bool& waiting) {
    ucred peer{};
    socklen_t length = sizeof peer;
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 || peer.uid != getuid())
      return nullptr;  // owner-only, even if the directory's permissions were changed under us
    Hello hello{};
    int fd = -1;
    const ssize_t n = receive_message(s, &hello, sizeof hello, fd);
    if (n < 0 && errno == EAGAIN) {
      waiting = true;
      return nullptr;
    }
    const bool acceptable =
        n == static_cast<ssize_t>(sizeof hello) && fd >= 0 && hello.magic == kHelloMagic &&
        hello.window >= 1 && hello.window <= options_.window &&
        hello.max_message_bytes <= options_.max_message_bytes && hello.ring_bytes <= kMaxRingBytes;
    std::error_code error;
    Segment segment;
    if (acceptable) {
      segment = Segment::map(
          fd, {hello.ring_bytes, hello.window, hello.max_message_bytes, hello.color}, error);
    }
    if (fd >= 0) close(fd);
    if (!segment) return nullptr;
    return std::make_unique<RingLink>(
        std::move(segment), 1, std::make_unique<ShmPeer>(s, hello.window, hello.max_message_bytes));
  }

  int socket_;
  std::string path_;
  std::string url_;
  Options options_;
  std::deque<Early> early_;
};

// The socket address of shm://NAME (and its path); false with `error` set if there is none.
bool shm_address(const std::string& name, sockaddr_un& address, std::string& path,
                 std::error_code& error) {
  path = shm_socket_path(name, error);
  if (error) return false;
  if (path.size() >= sizeof address.sun_path) {
    error = make_error_code(Errc::bad_url);
    return false;
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return true;
}

}  // namespace

std::unique_ptr<Listener> listen_shm(const std::string& name, Engine& engine,
                                     std::error_code& error) {
  sockaddr_un address{};
  std::string path;
  if (!shm_address(name, address, path, error)) return nullptr;
  const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) {
    error = errno_code();
    return nullptr;
  }
  // A socket file left by a server that died is reused; one that answers is in use.
  const int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  const bool in_use =
      connect(probe, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
  close(probe);
  if (in_use) {
    close(s);
    error = std::make_error_code(std::errc::address_in_use);
    return nullptr;
  }
  unlink(path.c_str());
  if (bind(s, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
      chmod(path.c_str(), 0600) != 0 || listen(s, 256) != 0) {
    error = errno_code();
    close(s);
    return nullptr;
  }
  return std::make_unique<ShmListener>(s, path, "shm://" + name, engine.options());
}

std::unique_ptr<Link> connect_shm(const std::string& name, Engine& engine, std::error_code& error) {
  sockaddr_un address{};
  std::string path;
  if (!shm_address(name, address, path, error)) return nullptr;
  const Options& o = engine.options();
  const Segment::Layout layout{Segment::round_ring_bytes(o.ring_bytes), o.window,
                               o.max_message_bytes, Segment::next_color()};
  int fd = -1;
  Segment segment = Segment::create(layout, fd, error);
  if (!segment) return nullptr;
  const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) {
    error = errno_code();
    close(fd);
    return nullptr;
  }
  // The kernel completes the connection from the server's backlog; when the backlog is full,
  // try again until connect_timeout.
  const auto give_up = std::chrono::steady_clock::now() + o.connect_timeout;
  int result = -1;
  while ((result = connect(s, reinterpret_cast<const sockaddr*>(&address), sizeof address)) != 0 &&
         errno == EAGAIN && std::chrono::steady_clock::now() < give_up) {
    usleep(1000);
  }
  const Hello hello{kHelloMagic, layout.ring_bytes, layout.window, layout.max_message_bytes,
                    layout.color};
  if (result != 0 || !send_message(s, &hello, sizeof hello, fd)) {
    error = errno == ENOENT || errno == ECONNREFUSED ? make_error_code(Errc::not_listening)
            : errno == EAGAIN                        ? std::make_error_code(std::errc::timed_out)
                                                     : errno_code();
    close(fd);
    close(s);
    return nullptr;
  }
  close(fd);
  return std::make_unique<RingLink>(
      std::move(segment), 0, std::make_unique<ShmPeer>(s, layout.window, layout.max_message_bytes));
}

}  // namespace rdmakit::rpc::detail

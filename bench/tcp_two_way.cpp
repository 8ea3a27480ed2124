// What carrying both directions of RDMA traffic on one TCP connection would cost, against
// softrdma's two (a process's requests and their answers on its link, the other host's
// requests and their answers on an inbound connection), and what two-way streaming can
// reach here at all. Each side streams SIZE-byte requests, at most WINDOW of them
// unanswered (an RC send queue's depth), and answers every request of the other side with
// a 32-byte answer as soon as it reads it. Each side busy-polls its non-blocking sockets
// in one thread, as a polling application does; answers are written before any request
// not yet begun.
//   oneway  the client streams, the server only answers (one connection): the reference
//   one     both stream on one connection: an answer leaves behind the requests of its own
//           side that the socket already holds (up to the send buffer: softrdma's 4 MiB)
//   lowat   as `one`, the socket holding at most LOWAT unsent bytes (TCP_NOTSENT_LOWAT),
//           so that an answer waits behind less
//   two     both stream; each side's requests and their answers on a connection of their own
// Prints, per pattern and side, the MiB/s of requests the side carried.
//
// Usage: tcp_two_way -p PORT                        (serves: run it on the other host)
//        tcp_two_way ADDRESS -p PORT [-s SIZE] [-w WINDOW] [-n COUNT] [-l LOWAT]
// bench/tcp_two_way.py runs both across two network namespaces.
#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <vector>

#include "tcp_bench_socket.hpp"

namespace {

using namespace tcp_bench;

using Clock = std::chrono::steady_clock;

enum Pattern { kOneWay, kOne, kLowat, kTwo, kPatternCount };
const char* const kPatterns[kPatternCount] = {"oneway", "one", "lowat", "two"};
constexpr int kSendBuffer = 4 << 20;  // as softrdma's data sockets (wire/socket_io.cpp)
constexpr uint32_t kMaxSize = 16u << 20;
constexpr uint32_t kMaxWindow = 4096;

enum Kind : uint32_t { kRequest = 1, kAnswer = 2, kResult = 3 };
struct Frame {
  uint32_t kind;
  uint32_t payload;  // bytes that follow
};
constexpr uint32_t kAnswerPad = 24;  // an answer is 32 bytes, as softrdma's Response
static_assert(sizeof(Frame) + kAnswerPad == 32, "an answer is the size of softrdma's");

// Each connection starts with this, from the client. `role` 0 carries the client's
// requests (and their answers), 1 the server's.
struct Hello {
  uint32_t pattern, size, window, count, role, lowat;
};
// What a side measured: the server sends its own in a kResult frame at the end.
struct Result {
  double mib_per_s;
};

void tune(int fd, const Hello& h) {
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kSendBuffer, sizeof kSendBuffer);
  const int lowat = static_cast<int>(h.lowat);
  if (h.pattern == kLowat &&
      setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat) != 0)
    die("TCP_NOTSENT_LOWAT");
}

// One connection's output: answers go first, then requests; a frame begun is finished
// before anything else is written.
struct Output {
  int fd;
  uint32_t answers = 0;       // requests to answer
  bool has_requests = false;  // this side's requests leave here
  // The frame being written: its header (and an answer's pad), and for a request the payload.
  Frame head{};
  char pad[kAnswerPad]{};
  size_t frame_bytes = 0, frame_sent = 0;
};

struct Side {
  int pattern;
  uint32_t size, window;
  uint32_t count, peer_count;  // requests this side sends, and the other side
  std::vector<int> fds;        // every socket, read in turn
  Output out[2];               // [0]: where this side's requests go; [1]: answers (two) or unused
  int outputs = 1;
  std::vector<char> payload;  // every request's bytes
  uint32_t sent = 0, answered = 0, answers_sent = 0;
  Result peer{};
  bool has_peer = false;
  struct Input {
    std::vector<char> buf;
    size_t filled = 0;
  };
  std::vector<Input> in;

  // Writes what `o` can take now. Returns false when nothing more was written.
  bool write(Output& o) {
    iovec iov[2];  // what is left of the header, then of the pad or payload
    int n = 0;
    if (o.frame_sent == o.frame_bytes) {  // start the next frame
      if (o.answers != 0) {
        o.head = Frame{kAnswer, kAnswerPad};
        --o.answers;
        o.frame_bytes = sizeof(Frame) + kAnswerPad;
      } else if (o.has_requests && sent < count && sent - answered < window) {
        o.head = Frame{kRequest, size};
        ++sent;
        o.frame_bytes = sizeof(Frame) + size;
      } else {
        return false;
      }
      o.frame_sent = 0;
    }
    const bool answer = o.head.kind == kAnswer;
    size_t skip = o.frame_sent;
    auto add = [&](void* p, size_t len) {
      if (skip >= len) {
        skip -= len;
        return;
      }
      iov[n++] = iovec{static_cast<char*>(p) + skip, len - skip};
      skip = 0;
    };
    add(&o.head, sizeof o.head);
    add(answer ? o.pad : payload.data(), answer ? kAnswerPad : size);
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(n);
    const ssize_t w = sendmsg(o.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) die("sendmsg");
    if (w <= 0) return false;
    o.frame_sent += static_cast<size_t>(w);
    if (answer && o.frame_sent == o.frame_bytes) ++answers_sent;
    return true;
  }

  void read(size_t which) {
    Input& i = in[which];
    const ssize_t r =
        recv(fds[which], i.buf.data() + i.filled, i.buf.size() - i.filled, MSG_DONTWAIT);
    if (r == 0) die("peer closed");
    if (r < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) die("recv");
      return;
    }
    i.filled += static_cast<size_t>(r);
    size_t used = 0;
    while (i.filled - used >= sizeof(Frame)) {
      Frame f;
      std::memcpy(&f, i.buf.data() + used, sizeof f);
      if (f.kind < kRequest || f.kind > kResult || f.payload > kMaxSize ||
          (f.kind == kResult && f.payload != sizeof(Result)))
        die("bad frame");
      if (i.filled - used < sizeof f + f.payload) break;
      used += sizeof f + f.payload;
      if (f.kind == kResult) {
        std::memcpy(&peer, i.buf.data() + used - sizeof peer, sizeof peer);
        has_peer = true;
      } else if (f.kind == kRequest) {
        // Answered on the connection it came on.
        ++out[pattern == kTwo ? (fds[which] == out[0].fd ? 0 : 1) : 0].answers;
      } else {
        ++answered;
      }
    }
    std::memmove(i.buf.data(), i.buf.data() + used, i.filled - used);
    i.filled -= used;
  }

  Result run() {
    in.resize(fds.size());
    for (auto& i : in) i.buf.resize(size + sizeof(Frame) + (1 << 20));
    payload.assign(size, 'x');
    out[0].has_requests = true;
    const auto start = Clock::now();
    // Bounded: every request is answered unless the peer dies, which ends the process.
    while (answered < count || answers_sent < peer_count) {
      for (size_t f = 0; f < fds.size(); ++f) read(f);
      for (int o = 0; o < outputs; ++o)
        for (int k = 0; k < 4 && write(out[o]); ++k) {
        }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return Result{static_cast<double>(size) * count / seconds / (1 << 20)};
  }
};

void check(const Hello& h) {
  if (h.pattern >= kPatternCount || h.size == 0 || h.size > kMaxSize || h.window == 0 ||
      h.window > kMaxWindow || h.count == 0 || h.lowat == 0)
    die("bad hello");
}

Side side_of(const Hello& h, bool server) {
  Side s;
  s.pattern = static_cast<int>(h.pattern);
  s.size = h.size;
  s.window = h.window;
  const uint32_t streams_back = h.pattern == kOneWay ? 0 : h.count;
  s.count = server ? streams_back : h.count;
  s.peer_count = server ? h.count : streams_back;
  return s;
}

[[noreturn]] void serve(uint16_t port) {
  const int listener = listen_on(port);
  for (int served = 0; served < kPatternCount; ++served) {
    Hello h{};
    const int first = accept_from(listener);
    recv_all(first, &h, sizeof h);
    check(h);
    Side s = side_of(h, true);
    tune(first, h);
    s.fds = {first};
    s.out[0].fd = first;
    if (s.pattern == kTwo) {
      Hello second{};
      const int other = accept_from(listener);
      recv_all(other, &second, sizeof second);
      tune(other, h);
      // The server's requests leave on role 1; the client's arrive (and are answered) on 0.
      const int mine = h.role == 1 ? first : other;
      const int theirs = h.role == 1 ? other : first;
      s.fds = {mine, theirs};
      s.out[0].fd = mine;
      s.out[1].fd = theirs;
      s.outputs = 2;
    }
    struct {
      Frame head;
      Result r;
    } result{{kResult, sizeof(Result)}, s.run()};
    // On the connection the client reads it from: the first of its pair.
    send_all(s.pattern == kTwo ? s.out[1].fd : first, &result, sizeof result);
    for (const int fd : s.fds) close(fd);
  }
  std::exit(0);
}

int connect_with(const char* address, uint16_t port, const Hello& h) {
  const int fd = connect_to(address, port);
  tune(fd, h);
  send_all(fd, &h, sizeof h);
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  const char* address = nullptr;
  uint16_t port = 0;
  uint32_t size = 65536, window = 128, count = 20000, lowat = 128 << 10;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "-p") && has_value)
      port = static_cast<uint16_t>(std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "-s") && has_value)
      size = static_cast<uint32_t>(std::atol(argv[++i]));
    else if (!std::strcmp(argv[i], "-l") && has_value)
      lowat = static_cast<uint32_t>(std::atol(argv[++i]));
    else if (!std::strcmp(argv[i], "-w") && has_value)
      window = static_cast<uint32_t>(std::atol(argv[++i]));
    else if (!std::strcmp(argv[i], "-n") && has_value)
      count = static_cast<uint32_t>(std::atol(argv[++i]));
    else
      address = argv[i];
  }
  if (port == 0) {
    std::fprintf(
        stderr,
        "usage: tcp_two_way [ADDRESS] -p PORT [-s SIZE] [-w WINDOW] [-n COUNT] [-l LOWAT]\n");
    return 2;
  }
  if (!address) serve(port);
  std::printf("%u-byte requests, %u unanswered at most, %u each way\n", size, window, count);
  std::printf("%-7s %-6s %10s\n", "", "side", "MiB/s");
  for (int p = 0; p < kPatternCount; ++p) {
    Hello h{static_cast<uint32_t>(p), size, window, count, 0, lowat};
    check(h);
    Side s = side_of(h, false);
    const int first = connect_with(address, port, h);
    s.fds = {first};
    s.out[0].fd = first;
    if (p == kTwo) {
      h.role = 1;
      const int other = connect_with(address, port, h);
      s.fds = {first, other};
      s.out[1].fd = other;
      s.outputs = 2;
    }
    const Result mine = s.run();
    while (!s.has_peer) s.read(0);  // bounded: the server sends it when it is done
    const Result results[2] = {mine, s.peer};
    for (int side = 0; side < (p == kOneWay ? 1 : 2); ++side)
      std::printf("%-7s %-6s %10.0f\n", kPatterns[p], side == 0 ? "client" : "server",
                  results[side].mib_per_s);
    std::fflush(stdout);
    for (const int fd : s.fds) close(fd);
  }
  return 0;
}

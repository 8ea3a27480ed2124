// What one message across two hosts costs at the socket itself, by how the receiver waits
// and by how many connections the two directions take: the floor under softrdma's
// cross-host latency (ib_send_lat, ib_write_lat). Both sides busy-poll non-blocking sockets;
// a round trip is a SIZE-byte message each way, and the median of N halves is printed.
//   one     one connection both ways, each side spinning on recv
//   epoll   one connection both ways, each side spinning on epoll_wait(0) before each recv
//   two     requests on one connection and answers on another, as softrdma's link and
//           inbound connection carry them; each side spins on recv over both sockets
//   two1    as `two`, each side reading only the socket its messages arrive on: what
//           reading the second socket adds
//   delack  as `two`, each side's acknowledgements delayed (TCP_QUICKACK off, renewed every
//           16 messages since the kernel turns it back on): what the extra segments cost
//   peek    as `two1`, each side peeking at the message (MSG_PEEK) and taking it out of the
//           socket (MSG_TRUNC) only after sending its own: the read that empties a socket
//           sends the acknowledgement then and there, and here that comes after the answer
// With `two` every message's TCP acknowledgement leaves as a packet of its own (nothing
// goes back on that connection to carry it): twice the segments of `one`.
//
// Usage: tcp_ping_pong -p PORT                        (serves: run it on the other host)
//        tcp_ping_pong ADDRESS -p PORT [-s SIZE] [-n N]
// bench/tcp_ping_pong.py runs both across two network namespaces.
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "tcp_bench_socket.hpp"

namespace {

using namespace tcp_bench;

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxSize = 4096;
enum Pattern { kOne, kEpoll, kTwo, kTwoReadOne, kTwoDelayedAcks, kTwoPeek, kPatternCount };
const char* const kPatterns[kPatternCount] = {"one", "epoll", "two", "two1", "delack", "peek"};
constexpr int kRenewDelayedAcksEvery = 16;

// The sockets of one pattern, as one side sees them.
struct Ends {
  int out = -1;   // where this side's messages go
  int in = -1;    // where the other side's arrive (== out with one connection)
  int epfd = -1;  // `epoll` only
  int pattern = kOne;
  unsigned received = 0;  // messages taken, for `delack`
  size_t peeked = 0;      // `peek`: the last message, still in the socket

  // `peek`: takes the last message out of the socket, after this side sent its own.
  void consume_peeked() {
    if (peeked == 0) return;
    if (recv(in, nullptr, peeked, MSG_TRUNC | MSG_DONTWAIT) != static_cast<ssize_t>(peeked))
      die("recv MSG_TRUNC");
    peeked = 0;
  }

  bool two_connections() const { return pattern >= kTwo; }

  // Takes one whole SIZE-byte message, spinning as the pattern does.
  void receive(char* buf, size_t size) {
    size_t got = 0;
    while (got < size) {
      if (pattern == kEpoll) {
        epoll_event e;
        if (epoll_wait(epfd, &e, 1, 0) != 1) continue;
      } else if (pattern == kTwo || pattern == kTwoDelayedAcks) {
        char ignored[64];  // the other socket, read in turn (nothing arrives there)
        (void)recv(out, ignored, sizeof ignored, MSG_DONTWAIT);
      }
      if (pattern == kTwoPeek) {  // a peek sees the whole message or waits for it
        const ssize_t p = recv(in, buf, size, MSG_DONTWAIT | MSG_PEEK);
        if (p == 0) die("peer closed");
        if (p < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) die("recv");
        if (p == static_cast<ssize_t>(size)) peeked = size;
        if (peeked) return;
        continue;
      }
      const ssize_t r = recv(in, buf + got, size - got, MSG_DONTWAIT);
      if (r == 0) die("peer closed");
      if (r > 0)
        got += static_cast<size_t>(r);
      else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        die("recv");
    }
    if (pattern == kTwoDelayedAcks && received++ % kRenewDelayedAcksEvery == 0) {
      const int off = 0;
      if (setsockopt(in, IPPROTO_TCP, TCP_QUICKACK, &off, sizeof off) != 0) die("TCP_QUICKACK");
    }
  }

  void close_all() const {
    if (in != out) close(in);
    close(out);
    if (epfd >= 0) close(epfd);
  }
};

void watch(Ends& e) {
  if (e.pattern != kEpoll) return;
  e.epfd = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (e.epfd < 0 || epoll_ctl(e.epfd, EPOLL_CTL_ADD, e.in, &ev) != 0) die("epoll");
}

// Each connection starts with a header the client sends: pattern, size, count, and for
// `two` which of the pair this connection is (0: the client's messages, 1: the answers).
struct Hello {
  uint32_t pattern, size, count, role;
};

int accept_one(int listener, Hello& h) {
  const int fd = accept_from(listener);
  recv_all(fd, &h, sizeof h);
  return fd;
}

[[noreturn]] void serve(uint16_t port) {
  const int listener = listen_on(port);
  for (int served = 0; served < kPatternCount; ++served) {
    Hello h{};
    Ends e;
    e.in = e.out = accept_one(listener, h);
    if (h.pattern >= kPatternCount || h.size == 0 || h.size > kMaxSize) die("bad hello");
    e.pattern = static_cast<int>(h.pattern);
    if (e.two_connections()) {
      Hello second{};
      const int other = accept_one(listener, second);
      // The client's messages arrive on role 0; answers leave on role 1.
      (h.role == 0 ? e.out : e.in) = other;
    }
    watch(e);
    std::vector<char> buf(h.size);
    for (uint32_t i = 0; i < h.count; ++i) {
      e.receive(buf.data(), h.size);
      send_all(e.out, buf.data(), h.size);
      e.consume_peeked();
    }
    e.close_all();
  }
  std::exit(0);
}

int connect_with(const char* address, uint16_t port, const Hello& h) {
  const int fd = connect_to(address, port);
  send_all(fd, &h, sizeof h);
  return fd;
}

double run(const char* address, uint16_t port, int pattern, uint32_t size, uint32_t count) {
  Hello h{static_cast<uint32_t>(pattern), size, count, 0};
  Ends e;
  e.pattern = pattern;
  e.out = e.in = connect_with(address, port, h);
  if (e.two_connections()) {
    h.role = 1;
    e.in = connect_with(address, port, h);
  }
  watch(e);
  std::vector<char> buf(size, 'x');
  std::vector<double> one_way(count);
  for (uint32_t i = 0; i < count; ++i) {
    const auto start = Clock::now();
    send_all(e.out, buf.data(), size);
    e.consume_peeked();
    e.receive(buf.data(), size);
    one_way[i] = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / 2;
  }
  e.close_all();
  std::nth_element(one_way.begin(), one_way.begin() + count / 2, one_way.end());
  return one_way[count / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const char* address = nullptr;
  long port = 0, size = 8, count = 100000;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "-p" || arg == "-s" || arg == "-n") && i + 1 < argc) {
      const long v = std::strtol(argv[++i], nullptr, 10);
      (arg == "-p" ? port : arg == "-s" ? size : count) = v;
    } else if (!address && arg[0] != '-') {
      address = argv[i];
    } else {
      std::fprintf(stderr, "usage: tcp_ping_pong [ADDRESS] -p PORT [-s SIZE] [-n N]\n");
      return 2;
    }
  }
  if (port <= 0 || port > 65535 || size <= 0 || size > static_cast<long>(kMaxSize) || count <= 0) {
    std::fprintf(stderr, "tcp_ping_pong: -p 1..65535, -s 1..%zu, -n positive\n", kMaxSize);
    return 2;
  }
  if (!address) serve(static_cast<uint16_t>(port));
  std::printf("%-6s %12s %8s\n", "", "one way us", "ratio");
  double first = 0;
  for (int p = 0; p < kPatternCount; ++p) {
    const double us = run(address, static_cast<uint16_t>(port), p, static_cast<uint32_t>(size),
                          static_cast<uint32_t>(count));
    if (p == 0) first = us;
    std::printf("%-6s %12.2f %7.2fx\n", kPatterns[p], us, us / first);
  }
  return 0;
}

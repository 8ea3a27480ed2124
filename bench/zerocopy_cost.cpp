// What MSG_ZEROCOPY saves a TCP sender on this machine: N messages of SIZE bytes from one
// thread to another over a TCP connection on ADDRESS (loopback by default), once with plain
// send() and once with MSG_ZEROCOPY (draining the completion notifications as a sender
// must), side by side, printing MiB/s, the CPU both threads used per GiB, and the ratios.
// softrdma's TCP transport sends without it: on local delivery the kernel copies zerocopy
// pages anyway, after pinning them and before notifying (docs/architecture.md).
//
// Usage: zerocopy_cost [SIZE] [N] [ADDRESS]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "zerocopy_cost: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Takes the notifications of finished zerocopy sends; false once none is waiting.
bool take_notification(int fd) {
  char control[128];
  msghdr m{};
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  return recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) >= 0;
}

void send_all(int fd, const char* data, size_t size, bool zerocopy) {
  for (size_t sent = 0; sent < size;) {
    const ssize_t w = send(fd, data + sent, size - sent, zerocopy ? MSG_ZEROCOPY : 0);
    if (w >= 0) {
      sent += static_cast<size_t>(w);
    } else if (errno == ENOBUFS && zerocopy) {
      while (take_notification(fd)) {  // the pinned-page budget is spent: free some
      }
    } else if (errno != EINTR) {
      die("send");
    }
  }
}

struct Result {
  double mib_per_s;
  double cpu_per_gib;
};

Result stream(bool zerocopy, size_t size, int count, const char* address) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (inet_pton(AF_INET, address, &a.sin_addr) != 1) die("address");
  socklen_t len = sizeof a;
  if (bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) || listen(listener, 1) ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len))
    die("listen");
  const size_t total = size * static_cast<size_t>(count);
  std::thread receiver([&] {
    const int c = accept(listener, nullptr, nullptr);
    std::vector<char> buffer(size);
    for (size_t got = 0; got < total;) {
      const ssize_t r = recv(c, buffer.data(), buffer.size(), 0);
      if (r <= 0) die("recv");
      got += static_cast<size_t>(r);
    }
    close(c);
  });
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a)) die("connect");
  const int one = 1;
  if (zerocopy && setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one)) die("SO_ZEROCOPY");
  const std::vector<char> data(size, 'x');
  const double cpu_before = cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) {
    send_all(fd, data.data(), size, zerocopy);
    while (zerocopy && take_notification(fd)) {
    }
  }
  receiver.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double gib = static_cast<double>(total) / (1 << 30);
  const Result r{gib * 1024 / seconds, (cpu_seconds() - cpu_before) / gib};
  close(fd);
  close(listener);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t size = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 65536;
  const int count = argc > 2 ? std::atoi(argv[2]) : 20000;
  const char* address = argc > 3 ? argv[3] : "127.0.0.1";
  if (size == 0 || count <= 0) {
    std::fprintf(stderr, "usage: zerocopy_cost [SIZE] [N] [ADDRESS]\n");
    return 2;
  }
  const Result plain = stream(false, size, count, address);
  const Result zerocopy = stream(true, size, count, address);
  std::printf(
      "size=%zu plain_mib_per_s=%.0f zerocopy_mib_per_s=%.0f plain_cpu_s_per_gib=%.3f "
      "zerocopy_cpu_s_per_gib=%.3f rate_ratio=%.2f cpu_ratio=%.2f\n",
      size, plain.mib_per_s, zerocopy.mib_per_s, plain.cpu_per_gib, zerocopy.cpu_per_gib,
      zerocopy.mib_per_s / plain.mib_per_s, zerocopy.cpu_per_gib / plain.cpu_per_gib);
  return 0;
}

// The raw floors of this machine, with no RPC library: what the transports' mechanisms cost
// bare (rpc-anchors.md §7). Each runs the same workload as the RPC benchmarks.
//   --where cacheline   a cache line bounced between two threads (the calibration C)
//   --where spsc        two single-producer rings of 64-byte slots between two threads
//   --where shm         the same rings in shared memory between two processes (fork)
//   --where tcp         a busy-polling TCP echo over loopback, one write per batch
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <thread>

#include "bench_common.hpp"

using namespace rdmakit::bench;

namespace {

constexpr unsigned kSlots = 256;

struct alignas(64) Slot {
  std::atomic<uint64_t> seq{0};
  char payload[56];
};
struct Rings {
  Slot requests[kSlots];
  Slot responses[kSlots];
  alignas(64) std::atomic<bool> stop{false};
};

void serve_rings(Rings& r) {
  for (uint64_t i = 0; !r.stop.load(std::memory_order_relaxed);) {
    Slot& in = r.requests[i % kSlots];
    if (in.seq.load(std::memory_order_acquire) != i + 1) continue;
    Slot& out = r.responses[i % kSlots];
    std::memcpy(out.payload, in.payload, 32);
    out.seq.store(i + 1, std::memory_order_release);
    ++i;
  }
}

void drive_rings(Rings& r, const Args& a) {
  Meter meter(a);
  std::vector<Clock::time_point> started(kSlots);
  uint64_t sent = 0, received = 0;
  while (!meter.finished()) {
    while (sent - received < a.depth) {
      Slot& s = r.requests[sent % kSlots];
      std::memset(s.payload, 1, 32);
      if (a.test == "latency") started[sent % kSlots] = Clock::now();
      s.seq.store(sent + 1, std::memory_order_release);
      ++sent;
    }
    Slot& in = r.responses[received % kSlots];
    if (in.seq.load(std::memory_order_acquire) != received + 1) continue;
    if (a.test == "latency") {
      meter.done(started[received % kSlots]);
    } else if ((received & 63) == 0) {
      meter.done_many(64);
    }
    ++received;
  }
  r.stop = true;
  meter.print("raw");
}

void cacheline(const Args& a) {
  alignas(64) static std::atomic<uint64_t> line{0};
  std::atomic<bool> stop{false};
  std::thread other([&] {
    for (uint64_t v = 1; !stop.load(std::memory_order_relaxed);) {
      if (line.load(std::memory_order_acquire) == v)
        line.store(++v, std::memory_order_release), ++v;
    }
  });
  Meter meter(a);
  for (uint64_t v = 0; !meter.finished(); v += 2) {
    const Clock::time_point t = Clock::now();
    line.store(v + 1, std::memory_order_release);
    while (line.load(std::memory_order_acquire) != v + 2) {
    }
    meter.done(t);
  }
  stop = true;
  other.join();
  meter.print("raw");
}

void tcp(const Args& a) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  listen(listener, 1);
  std::atomic<bool> stop{false};
  std::thread server([&] {
    const int s = accept(listener, nullptr, nullptr);
    const int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(s, F_SETFL, O_NONBLOCK);
    std::vector<char> buffer(1 << 16);
    while (!stop) {
      const ssize_t n = recv(s, buffer.data(), buffer.size(), 0);
      if (n > 0) {
        for (ssize_t off = 0; off < n;) {
          const ssize_t w =
              send(s, buffer.data() + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
          if (w > 0) off += w;
        }
      } else if (n == 0) {
        break;
      }
    }
    close(s);
  });
  const int c = socket(AF_INET, SOCK_STREAM, 0);
  connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  const int one = 1;
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(c, F_SETFL, O_NONBLOCK);
  Meter meter(a);
  std::vector<char> out(a.size * a.depth, 1), in(1 << 16);
  size_t pending_bytes = 0;
  Clock::time_point started = Clock::now();
  while (!meter.finished()) {
    if (pending_bytes == 0) {  // a batch of `depth` messages in one write
      started = Clock::now();
      for (size_t off = 0; off < out.size();) {
        const ssize_t w = send(c, out.data() + off, out.size() - off, MSG_NOSIGNAL);
        if (w > 0) off += static_cast<size_t>(w);
      }
      pending_bytes = out.size();
    }
    const ssize_t n = recv(c, in.data(), in.size(), 0);
    if (n <= 0) continue;
    pending_bytes -= static_cast<size_t>(n);
    if (pending_bytes == 0) {
      if (a.test == "latency")
        meter.done(started);
      else
        meter.done_many(a.depth);
    }
  }
  stop = true;
  shutdown(c, SHUT_RDWR);
  server.join();
  close(c);
  close(listener);
  meter.print("raw");
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  if (a.where == "cacheline") {
    cacheline(a);
  } else if (a.where == "spsc") {
    auto* r = new Rings;
    std::thread server([r] { serve_rings(*r); });
    drive_rings(*r, a);
    server.join();
    delete r;
  } else if (a.where == "shm") {
    void* mem =
        mmap(nullptr, sizeof(Rings), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    auto* r = new (mem) Rings;
    const pid_t child = fork();
    if (child == 0) {
      serve_rings(*r);
      _exit(0);
    }
    drive_rings(*r, a);
    waitpid(child, nullptr, 0);
  } else if (a.where == "tcp") {
    tcp(a);
  } else {
    std::fprintf(stderr, "floors: --where cacheline|spsc|shm|tcp\n");
    return 2;
  }
  return 0;
}

// How one thread drives its QPs through the test: an engine per data path (poll mode or
// coroutines) behind one interface, so the sequence of a run is written once (perf_run.cpp).
// An engine belongs to the thread that created it. Receives failing while a QP holds a
// message not yet taken are not errors either: a peer closes right after its last message.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <thread>

#include "perf_messages.hpp"
#include "perf_options.hpp"
#include "perf_session.hpp"
#include "perf_stats.hpp"

namespace rdmakit::tool {

class Engine {
 public:
  virtual ~Engine() = default;

  // Sends a control message on every QP and waits until each send completed.
  virtual void send_to_all(MessageKind kind, std::span<const std::byte> payload) = 0;
  // Waits until every QP holds a received control message (Peer::message).
  virtual void wait_for_messages(std::string_view what) = 0;
  // Client: runs one size of the test on every QP.
  virtual Measurement measure(uint64_t size) = 0;
  // Server: plays its part in one size until every QP holds the client's DONE.
  virtual void serve(uint64_t size) = 0;
  // This side is about to send its last message: from now on the peer may close the
  // connections, and receives failing is no longer an error.
  virtual void expect_close() = 0;
};

std::unique_ptr<Engine> make_poll_engine(Worker& worker, const PerfOptions& options);
std::unique_ptr<Engine> make_coroutine_engine(Worker& worker, const PerfOptions& options);

// True for the server of a test whose operations are one-sided (write_bw, read_bw, read_lat,
// atomic_bw, atomic_lat): it has nothing to do until the client's DONE, and spinning would
// take a core from the client it serves (perftest's server sleeps on its socket).
inline bool passive(const PerfOptions& o) {
  const TestInfo& test = o.test_info();
  return o.server() && test.verb != Verb::send && (test.bandwidth || test.verb != Verb::write);
}
// How a passive server waits between empty polls: long enough to leave the CPU, short
// enough that the next size starts at once.
inline void rest() {
  std::this_thread::sleep_for(std::chrono::microseconds(50));
}

// The marker bytes of write_lat's ping-pong: each side polls the last byte of its slot for the
// peer's next marker. Pings are odd and pongs even, so neither side mistakes the byte it
// wrote itself (it stays in its slot until the peer overwrites it) for the peer's.
inline unsigned char ping_marker(uint64_t round) {
  return static_cast<unsigned char>(1 + 2 * (round % 127));
}
inline unsigned char pong_marker(uint64_t round) {
  return static_cast<unsigned char>(ping_marker(round) + 1);
}
// The peer's RDMA WRITE changes the byte behind the compiler's back.
inline unsigned char load_marker(std::byte& b) {
  return std::atomic_ref(reinterpret_cast<unsigned char&>(b)).load(std::memory_order_acquire);
}
inline void store_marker(std::byte& b, unsigned char v) {
  std::atomic_ref(reinterpret_cast<unsigned char&>(b)).store(v, std::memory_order_relaxed);
}

inline double usec(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

}  // namespace rdmakit::tool

// The coroutine engine: every QP an AsyncQueuePair on the thread's Poller; tx-depth
// coroutines per QP in bandwidth tests, one per QP in latency tests, and coroutines that keep
// receives posted. The thread polls; coroutines resume on it.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>

#include "bounded.hpp"
#include "conditions.hpp"
#include "perf_engine.hpp"
#include "rdmakit/async_queue_pair.hpp"
#include "rdmakit/poller.hpp"
#include "rdmakit/task.hpp"

namespace rdmakit::tool {
namespace {

// Cancelled work ends at once on a device; far longer means the process cannot exit cleanly.
constexpr auto kDrainLimit = std::chrono::seconds(10);

class CoroutineEngine final : public Engine {
 public:
  CoroutineEngine(Worker& w, const PerfOptions& o);
  ~CoroutineEngine() override { drain(); }

  void send_to_all(MessageKind kind, std::span<const std::byte> payload) override;
  void wait_for_messages(std::string_view what) override;
  Measurement measure(uint64_t size) override;
  void serve(uint64_t size) override;
  void expect_close() override { closing_ = true; }

 private:
  // Polls and resumes waiters until done() holds. Throws PerfError when a coroutine failed
  // or nothing happened for the timeout, after ending everything in flight.
  template <typename Done>
  void run_until(Done done, std::string_view what);
  // Moves every QP to ERROR (their operations complete, flushed) and polls until no
  // operation and no coroutine is left.
  void drain() noexcept;
  [[noreturn]] void give_up(const std::string& why);
  void fail(size_t p, std::error_code ec, const char* what);
  bool all_have_messages() const;
  // The test's WRITE, READ or SEND (atomics have their own awaiter type).
  AsyncQueuePair::SendAwaiter data_op(size_t p, uint64_t size);

  Task<void> receive_loop(size_t p);
  Task<void> send_control(size_t p, MessageKind kind, size_t length);
  Task<void> keep_depth(size_t p, uint64_t size, Measurement& m);
  Task<void> one_at_a_time(size_t p, uint64_t size, Measurement& m);
  Task<void> write_pingpong(size_t p, uint64_t size, Measurement& m);
  Task<void> send_pingpong(size_t p, uint64_t size, Measurement& m);
  Task<void> answer_writes(size_t p, uint64_t size);
  Task<void> answer_sends(size_t p, uint64_t size);

  Worker& w_;
  const PerfOptions& o_;
  Poller poller_;
  std::deque<AsyncQueuePair> qps_;  // destroyed before the poller
  Conditions conditions_;
  std::vector<uint64_t> issued_;    // bandwidth tests: operations started per QP
  std::vector<uint64_t> rounds_;    // write_lat: ping-pong rounds per QP, ever
  std::vector<uint64_t> answered_;  // send_lat (server): pongs sent per QP, ever
  uint32_t running_ = 0;            // coroutines of the current step
  uint32_t receivers_ = 0;
  std::string failure_;  // the first failure a coroutine met
  const bool passive_;
  bool stopping_ = false;
  bool closing_ = false;
};

CoroutineEngine::CoroutineEngine(Worker& w, const PerfOptions& o)
    : w_(w),
      o_(o),
      poller_(w.resources->cq),
      issued_(w.peers.size()),
      rounds_(w.peers.size()),
      answered_(w.peers.size()),
      passive_(passive(o)) {
  for (Peer& p : w_.peers) qps_.emplace_back(poller_, p.connection.qp());
  for (size_t p = 0; p < w_.peers.size(); ++p) {
    const uint32_t depth =
        std::min(receive_depth(o_), w_.peers[p].connection.qp().caps().recv_depth);
    for (uint32_t i = 0; i < depth; ++i) spawn(receive_loop(p));
  }
}

template <typename Done>
void CoroutineEngine::run_until(Done done, std::string_view what) {
  Deadline deadline(o_.timeout());
  while (!done() && failure_.empty()) {
    if (static_cast<size_t>(poller_.poll()) + conditions_.resume_ready() > 0)
      deadline.progress();
    else if (passive_)
      rest();
    try {
      deadline.check(what);
    } catch (const PerfError& e) {
      give_up(e.what());
    }
  }
  if (!failure_.empty()) give_up(failure_);
}

void CoroutineEngine::give_up(const std::string& why) {
  const std::string message = why;  // `why` may be failure_, which draining can change
  drain();
  throw PerfError(message);
}

void CoroutineEngine::drain() noexcept {
  auto busy = [&] {
    return running_ > 0 || receivers_ > 0 ||
           std::any_of(qps_.begin(), qps_.end(), [](auto& q) { return q.in_flight() > 0; });
  };
  if (!busy()) return;
  stopping_ = true;
  for (Peer& p : w_.peers) (void)p.connection.qp().to_error();
  const auto limit = Clock::now() + kDrainLimit;
  while (busy() && Clock::now() < limit) {
    poller_.poll();
    conditions_.resume_ready();
  }
  if (busy()) {
    // Destroying an AsyncQueuePair with operations in flight would be a programming error.
    std::fputs("rdmakit perf: operations did not end after their QPs were stopped\n", stderr);
    std::_Exit(1);
  }
}

void CoroutineEngine::fail(size_t p, std::error_code ec, const char* what) {
  if (stopping_ || !failure_.empty()) return;
  failure_ =
      "QP " + std::to_string(w_.peers[p].index) + ": " + what + " failed: " + ec.message() +
      (ec == completion_error(IBV_WC_WR_FLUSH_ERR) || ec == completion_error(IBV_WC_RETRY_EXC_ERR)
           ? " (the peer closed the connection or exited)"
           : "");
}

bool CoroutineEngine::all_have_messages() const {
  return std::all_of(w_.peers.begin(), w_.peers.end(),
                     [](const Peer& p) { return p.message.has_value(); });
}

AsyncQueuePair::SendAwaiter CoroutineEngine::data_op(size_t p, uint64_t size) {
  const Peer& peer = w_.peers[p];
  switch (o_.test_info().verb) {
    case Verb::read:
      return qps_[p].read(peer.slot.first(size), peer.remote.first(size));
    case Verb::send:
      return qps_[p].send(peer.slot.first(size));
    default:
      return qps_[p].write(peer.slot.first(size), peer.remote.first(size));
  }
}

Task<void> CoroutineEngine::receive_loop(size_t p) {
  Peer& peer = w_.peers[p];
  ++receivers_;
  while (!stopping_) {
    const Received got = co_await qps_[p].recv(peer.recv_buf);
    if (got.error) {
      if (!closing_ && !peer.message) fail(p, got.error, "a receive");
      break;
    }
    if (!got.imm) {
      ++peer.data_received;
    } else if (const char* wrong =
                   take_message(peer, *got.imm, peer.recv_buf.bytes().first(got.byte_len))) {
      if (failure_.empty()) failure_ = wrong;
    }
  }
  --receivers_;
}

Task<void> CoroutineEngine::send_control(size_t p, MessageKind kind, size_t length) {
  const std::error_code ec = co_await qps_[p].send_with_imm(w_.peers[p].ctrl_out.first(length),
                                                            static_cast<uint32_t>(kind));
  if (ec) fail(p, ec, "sending a control message");
  --running_;
}

void CoroutineEngine::send_to_all(MessageKind kind, std::span<const std::byte> payload) {
  for (size_t p = 0; p < w_.peers.size(); ++p) {
    std::copy(payload.begin(), payload.end(), w_.peers[p].ctrl_out.data());
    ++running_;
    spawn(send_control(p, kind, payload.size()));
  }
  run_until([&] { return running_ == 0; }, "the peer to take a control message");
}

void CoroutineEngine::wait_for_messages(std::string_view what) {
  run_until([&] { return all_have_messages(); }, what);
}

// Bandwidth: tx-depth of these per QP, each taking the next operation until all are issued.
Task<void> CoroutineEngine::keep_depth(size_t p, uint64_t size, Measurement& m) {
  const Peer& peer = w_.peers[p];
  while (issued_[p] < o_.iters && !stopping_) {
    ++issued_[p];
    std::error_code ec;
    if (o_.test_info().verb == Verb::atomic)
      ec = (co_await qps_[p].fetch_add(peer.slot.first(8), peer.remote.first(8), 1)).error;
    else
      ec = co_await data_op(p, size);
    if (ec) {
      fail(p, ec, "an operation");
      break;
    }
    m.completions.push_back({Clock::now(), 1});
  }
  --running_;
}

// read_lat and atomic_lat: one operation at a time, timed from start to completion.
Task<void> CoroutineEngine::one_at_a_time(size_t p, uint64_t size, Measurement& m) {
  const Peer& peer = w_.peers[p];
  for (uint32_t i = 0; i < o_.iters && !stopping_; ++i) {
    const Clock::time_point started = Clock::now();
    std::error_code ec;
    if (o_.test_info().verb == Verb::atomic)
      ec = (co_await qps_[p].fetch_add(peer.slot.first(8), peer.remote.first(8), 1)).error;
    else
      ec = co_await data_op(p, size);
    if (ec) {
      fail(p, ec, "an operation");
      break;
    }
    m.latencies_usec.push_back(usec(Clock::now() - started));
  }
  --running_;
}

// write_lat: WRITE a ping, then wait for the server's WRITE to change our last byte.
Task<void> CoroutineEngine::write_pingpong(size_t p, uint64_t size, Measurement& m) {
  const Peer& peer = w_.peers[p];
  std::byte& marker = peer.slot.data()[size - 1];
  for (uint32_t i = 0; i < o_.iters && !stopping_; ++i) {
    store_marker(marker, ping_marker(rounds_[p]));
    const Clock::time_point started = Clock::now();
    const std::error_code ec =
        co_await qps_[p].write(peer.slot.first(size), peer.remote.first(size));
    if (ec) {
      fail(p, ec, "an RDMA WRITE");
      break;
    }
    const unsigned char pong = pong_marker(rounds_[p]);
    co_await conditions_.until(
        [&marker, pong, this] { return load_marker(marker) == pong || stopping_; });
    if (stopping_) break;
    m.latencies_usec.push_back(usec(Clock::now() - started) / 2);
    ++rounds_[p];
  }
  --running_;
}

// send_lat: SEND a ping, then wait for the receive of the server's reply.
Task<void> CoroutineEngine::send_pingpong(size_t p, uint64_t size, Measurement& m) {
  const Peer& peer = w_.peers[p];
  for (uint32_t i = 0; i < o_.iters && !stopping_; ++i) {
    const uint64_t expected = peer.data_received + 1;
    const Clock::time_point started = Clock::now();
    const std::error_code ec = co_await qps_[p].send(peer.slot.first(size));
    if (ec) {
      fail(p, ec, "a SEND");
      break;
    }
    co_await conditions_.until(
        [&peer, expected, this] { return peer.data_received >= expected || stopping_; });
    if (stopping_) break;
    m.latencies_usec.push_back(usec(Clock::now() - started) / 2);
  }
  --running_;
}

Measurement CoroutineEngine::measure(uint64_t size) {
  const TestInfo& test = o_.test_info();
  Measurement m;
  // Growing the vectors while measuring would be timed too.
  if (test.bandwidth)
    m.completions.reserve(uint64_t{o_.iters} * w_.peers.size());
  else
    m.latencies_usec.reserve(uint64_t{o_.iters} * w_.peers.size());
  std::fill(issued_.begin(), issued_.end(), 0);
  m.start = Clock::now();
  for (size_t p = 0; p < w_.peers.size(); ++p) {
    const uint32_t count = test.bandwidth ? o_.tx_depth : 1;
    for (uint32_t i = 0; i < count; ++i) {
      ++running_;
      if (test.bandwidth)
        spawn(keep_depth(p, size, m));
      else if (test.verb == Verb::write)
        spawn(write_pingpong(p, size, m));
      else if (test.verb == Verb::send)
        spawn(send_pingpong(p, size, m));
      else
        spawn(one_at_a_time(p, size, m));
    }
  }
  run_until([&] { return running_ == 0; }, "completions of the test's operations");
  m.end = m.completions.empty() ? Clock::now() : m.completions.back().time;
  m.ops = test.bandwidth ? uint64_t{o_.iters} * w_.peers.size() : m.latencies_usec.size();
  return m;
}

// write_lat, server side: answer each ping with a WRITE until the client's DONE.
Task<void> CoroutineEngine::answer_writes(size_t p, uint64_t size) {
  const Peer& peer = w_.peers[p];
  std::byte& marker = peer.slot.data()[size - 1];
  while (!stopping_) {
    const unsigned char ping = ping_marker(rounds_[p]);
    co_await conditions_.until([&marker, &peer, ping, this] {
      return load_marker(marker) == ping || peer.message.has_value() || stopping_;
    });
    if (load_marker(marker) != ping || stopping_) break;
    store_marker(marker, pong_marker(rounds_[p]));
    ++rounds_[p];
    const std::error_code ec =
        co_await qps_[p].write(peer.slot.first(size), peer.remote.first(size));
    if (ec) {
      fail(p, ec, "an RDMA WRITE");
      break;
    }
  }
  --running_;
}

// send_lat, server side: answer each ping received with a SEND until the client's DONE.
Task<void> CoroutineEngine::answer_sends(size_t p, uint64_t size) {
  const Peer& peer = w_.peers[p];
  while (!stopping_) {
    co_await conditions_.until([&peer, p, this] {
      return answered_[p] < peer.data_received || peer.message.has_value() || stopping_;
    });
    if (answered_[p] >= peer.data_received || stopping_) break;
    ++answered_[p];
    const std::error_code ec = co_await qps_[p].send(peer.slot.first(size));
    if (ec) {
      fail(p, ec, "a SEND");
      break;
    }
  }
  --running_;
}

void CoroutineEngine::serve(uint64_t size) {
  const TestInfo& test = o_.test_info();
  if (!test.bandwidth && (test.verb == Verb::write || test.verb == Verb::send)) {
    for (size_t p = 0; p < w_.peers.size(); ++p) {
      ++running_;
      spawn(test.verb == Verb::write ? answer_writes(p, size) : answer_sends(p, size));
    }
  }
  // One-sided operations need nothing from this side; SENDs only the posted receives.
  run_until([&] { return running_ == 0 && all_have_messages(); },
            "the client's operations and its DONE message");
}

}  // namespace

std::unique_ptr<Engine> make_coroutine_engine(Worker& worker, const PerfOptions& options) {
  return std::make_unique<CoroutineEngine>(worker, options);
}

}  // namespace rdmakit::tool

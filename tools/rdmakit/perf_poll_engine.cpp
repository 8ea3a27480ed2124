// The poll-mode engine: requests queued into PollQueuePair batches (one doorbell per QP per
// round, selective signalling), completions taken from the CQ in batches by this thread.
#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <deque>

#include "bounded.hpp"
#include "perf_engine.hpp"
#include "rdmakit/poll_queue_pair.hpp"

namespace rdmakit::tool {
namespace {

// wr_id of a receive; the low bits are the QP's place in the worker, for sends too.
constexpr uint64_t kRecvTag = uint64_t{1} << 63;
constexpr size_t kRecvChain = 32;

class PollEngine final : public Engine {
 public:
  PollEngine(Worker& w, const PerfOptions& o);

  void send_to_all(MessageKind kind, std::span<const std::byte> payload) override;
  void wait_for_messages(std::string_view what) override;
  Measurement measure(uint64_t size) override;
  void serve(uint64_t size) override;
  void expect_close() override { closing_ = true; }

 private:
  // Takes one batch of completions: retires sends, keeps receives posted, takes messages.
  // Returns the completions handled.
  int poll();
  void replenish();
  // Queues the test's operation on QP p; false when its send queue is full.
  bool queue(size_t p, uint64_t size);
  // Queues it, polling until there is room, and posts it.
  void start(size_t p, uint64_t size, Deadline& deadline);
  void post(size_t p);
  bool all_have_messages() const;
  [[noreturn]] void fail(size_t p, const ibv_wc& wc, const char* what) const;

  Measurement measure_bw(uint64_t size);
  // Rounds of one operation in flight per QP: a round on QP p ends when `arrived(p)` (a
  // count that only grows) moves past its value at the start; its time is divided by `legs`
  // (2 for a ping-pong, whose round trip is two one-way latencies).
  template <typename Arrived>
  Measurement measure_rounds(uint64_t size, Arrived arrived, uint32_t legs,
                             const char* waiting_for);
  Measurement measure_write_pingpong(uint64_t size);
  void serve_write_pingpong(uint64_t size);
  void serve_send_pingpong(uint64_t size);

  Worker& w_;
  const PerfOptions& o_;
  const CompletionQueue& cq_;
  std::deque<PollQueuePair> qps_;  // a deque: PollQueuePair stays where it was built
  std::vector<uint64_t> retired_;  // send requests retired per QP, ever
  uint64_t retired_total_ = 0;
  std::vector<uint32_t> posted_recvs_;
  std::vector<uint64_t> rounds_;    // write_lat: ping-pong rounds per QP, ever
  std::vector<uint64_t> answered_;  // send_lat (server): pongs sent per QP, ever
  std::vector<bool> closed_;        // a receive failed: posting more would only fail too
  uint32_t recv_depth_;
  std::array<ibv_wc, 64> wcs_{};
  const bool passive_;
  bool closing_ = false;
};

PollEngine::PollEngine(Worker& w, const PerfOptions& o)
    : w_(w),
      o_(o),
      cq_(w.resources->cq),
      retired_(w.peers.size()),
      posted_recvs_(w.peers.size()),
      rounds_(w.peers.size()),
      answered_(w.peers.size()),
      closed_(w.peers.size()),
      recv_depth_(receive_depth(o)),
      passive_(passive(o)) {
  for (Peer& p : w_.peers) {
    qps_.emplace_back(p.connection.qp());
    recv_depth_ = std::min(recv_depth_, p.connection.qp().caps().recv_depth);
  }
  replenish();
}

void PollEngine::fail(size_t p, const ibv_wc& wc, const char* what) const {
  throw PerfError("QP " + std::to_string(w_.peers[p].index) + ": " + what +
                  " failed: " + completion_error(wc.status).message() +
                  (wc.status == IBV_WC_WR_FLUSH_ERR || wc.status == IBV_WC_RETRY_EXC_ERR
                       ? " (the peer closed the connection or exited)"
                       : ""));
}

int PollEngine::poll() {
  const int n = cq_.poll(wcs_);
  if (n < 0) throw PerfError("polling the completion queue failed");
  for (const ibv_wc& wc : std::span(wcs_).first(static_cast<size_t>(n))) {
    const size_t p = wc.wr_id & ~kRecvTag;
    Peer& peer = w_.peers[p];
    if (wc.wr_id & kRecvTag) {
      --posted_recvs_[p];
      if (wc.status != IBV_WC_SUCCESS) {
        closed_[p] = true;
        if (closing_ || peer.message) continue;
        fail(p, wc, "a receive");
      }
      if (!(wc.wc_flags & IBV_WC_WITH_IMM)) {
        ++peer.data_received;
      } else if (const char* wrong = take_message(peer, ntohl(wc.imm_data),
                                                  peer.recv_buf.bytes().first(wc.byte_len))) {
        throw PerfError(wrong);
      }
    } else {
      const uint32_t retired = qps_[p].retire(wc);
      retired_[p] += retired;
      retired_total_ += retired;
      if (wc.status != IBV_WC_SUCCESS) fail(p, wc, "a send-queue request");
    }
  }
  if (n > 0) replenish();
  return n;
}

void PollEngine::replenish() {
  std::array<ibv_recv_wr, kRecvChain> wrs{};
  for (size_t p = 0; p < w_.peers.size(); ++p) {
    ibv_sge sge = w_.peers[p].recv_buf.sge();
    while (!closed_[p] && posted_recvs_[p] < recv_depth_) {
      const size_t k = std::min<size_t>(kRecvChain, recv_depth_ - posted_recvs_[p]);
      for (size_t i = 0; i < k; ++i)
        wrs[i] = {kRecvTag | p, i + 1 < k ? &wrs[i + 1] : nullptr, &sge, 1};
      if (std::error_code ec = w_.peers[p].connection.qp().post_recv(wrs[0]))
        throw PerfError("QP " + std::to_string(w_.peers[p].index) +
                        ": posting receives failed: " + ec.message());
      posted_recvs_[p] += static_cast<uint32_t>(k);
    }
  }
}

void PollEngine::post(size_t p) {
  if (std::error_code ec = qps_[p].post())
    throw PerfError("QP " + std::to_string(w_.peers[p].index) +
                    ": posting requests failed: " + ec.message());
}

bool PollEngine::queue(size_t p, uint64_t size) {
  Peer& peer = w_.peers[p];
  PollQueuePair& q = qps_[p];
  switch (o_.test_info().verb) {
    case Verb::write:
      return q.write(peer.slot.first(size), peer.remote.first(size), p);
    case Verb::read:
      return q.read(peer.slot.first(size), peer.remote.first(size), p);
    case Verb::send:
      return q.send(peer.slot.first(size), p);
    case Verb::atomic:
      return q.fetch_add(peer.slot.first(8), peer.remote.first(8), 1, p);
  }
  return false;
}

void PollEngine::start(size_t p, uint64_t size, Deadline& deadline) {
  while (!queue(p, size)) {
    if (poll() > 0) deadline.progress();
    deadline.check("room in a send queue");
  }
  post(p);
}

bool PollEngine::all_have_messages() const {
  return std::all_of(w_.peers.begin(), w_.peers.end(),
                     [](const Peer& p) { return p.message.has_value(); });
}

void PollEngine::send_to_all(MessageKind kind, std::span<const std::byte> payload) {
  Deadline deadline(o_.timeout());
  for (size_t p = 0; p < w_.peers.size(); ++p) {
    LocalBuffer out = w_.peers[p].ctrl_out.first(payload.size());
    std::copy(payload.begin(), payload.end(), out.data());
    while (!qps_[p].send_with_imm(out, static_cast<uint32_t>(kind), p)) {
      if (poll() > 0) deadline.progress();
      deadline.check("room in a send queue");
    }
    post(p);
  }
  // The control area is reused by the next message: wait until the device read it.
  auto busy = [&] {
    return std::any_of(qps_.begin(), qps_.end(), [](auto& q) { return q.outstanding() > 0; });
  };
  while (busy()) {
    if (poll() > 0) deadline.progress();
    deadline.check("the peer to take a control message");
  }
}

void PollEngine::wait_for_messages(std::string_view what) {
  Deadline deadline(o_.timeout());
  while (!all_have_messages()) {
    if (poll() > 0)
      deadline.progress();
    else if (passive_)
      rest();
    deadline.check(what);
  }
}

Measurement PollEngine::measure(uint64_t size) {
  const TestInfo& test = o_.test_info();
  if (test.bandwidth) return measure_bw(size);
  if (test.verb == Verb::write) return measure_write_pingpong(size);
  // send_lat: ping-pong by SEND/RECV (receives stay posted ahead), a round per reply.
  if (test.verb == Verb::send)
    return measure_rounds(
        size, [this](size_t p) { return w_.peers[p].data_received; }, 2, "the server's SEND reply");
  // read_lat and atomic_lat: timed from post to completion.
  return measure_rounds(
      size, [this](size_t p) { return retired_[p]; }, 1, "completions of the test's operations");
}

Measurement PollEngine::measure_bw(uint64_t size) {
  const size_t peers = w_.peers.size();
  const uint64_t total = uint64_t{o_.iters} * peers;
  std::vector<uint64_t> issued(peers);
  Measurement m;
  m.completions.reserve(total);
  Deadline deadline(o_.timeout());
  uint64_t done = 0;
  m.start = Clock::now();
  while (done < total) {
    for (size_t p = 0; p < peers; ++p) {
      PollQueuePair& q = qps_[p];
      while (issued[p] < o_.iters && q.outstanding() + q.queued() < o_.tx_depth && queue(p, size))
        ++issued[p];
      if (q.queued() > 0) post(p);
    }
    const uint64_t before = retired_total_;
    if (poll() > 0 && retired_total_ > before) {
      m.completions.push_back({Clock::now(), static_cast<uint32_t>(retired_total_ - before)});
      done += retired_total_ - before;
      deadline.progress();
    }
    deadline.check("completions of the test's operations");
  }
  m.end = m.completions.empty() ? Clock::now() : m.completions.back().time;
  m.ops = total;
  return m;
}

template <typename Arrived>
Measurement PollEngine::measure_rounds(uint64_t size, Arrived arrived, uint32_t legs,
                                       const char* waiting_for) {
  const size_t peers = w_.peers.size();
  std::vector<uint64_t> done(peers), expected(peers);
  std::vector<Clock::time_point> started(peers);
  Measurement m;
  m.latencies_usec.reserve(uint64_t{o_.iters} * peers);
  Deadline deadline(o_.timeout());
  auto start_one = [&](size_t p) {
    expected[p] = arrived(p) + 1;
    started[p] = Clock::now();
    start(p, size, deadline);
  };
  for (size_t p = 0; p < peers; ++p) start_one(p);
  size_t finished = 0;
  while (finished < peers) {
    if (poll() > 0) {
      const Clock::time_point now = Clock::now();
      deadline.progress();
      for (size_t p = 0; p < peers; ++p) {
        if (done[p] == o_.iters || arrived(p) < expected[p]) continue;
        m.latencies_usec.push_back(usec(now - started[p]) / legs);
        if (++done[p] < o_.iters)
          start_one(p);
        else
          ++finished;
      }
    }
    deadline.check(waiting_for);
  }
  m.ops = m.latencies_usec.size();
  return m;
}

// write_lat: ping-pong by RDMA WRITE, each side polling the last byte of its own slot.
Measurement PollEngine::measure_write_pingpong(uint64_t size) {
  const size_t peers = w_.peers.size();
  std::vector<uint64_t> done(peers);
  std::vector<Clock::time_point> started(peers);
  Measurement m;
  m.latencies_usec.reserve(uint64_t{o_.iters} * peers);
  Deadline deadline(o_.timeout());
  auto ping = [&](size_t p) {
    Peer& peer = w_.peers[p];
    store_marker(peer.slot.data()[size - 1], ping_marker(rounds_[p]));
    started[p] = Clock::now();
    start(p, size, deadline);
  };
  for (size_t p = 0; p < peers; ++p) ping(p);
  size_t finished = 0;
  while (finished < peers) {
    for (size_t p = 0; p < peers; ++p) {
      if (done[p] == o_.iters ||
          load_marker(w_.peers[p].slot.data()[size - 1]) != pong_marker(rounds_[p]))
        continue;
      m.latencies_usec.push_back(usec(Clock::now() - started[p]) / 2);
      deadline.progress();
      ++rounds_[p];
      if (++done[p] < o_.iters)
        ping(p);
      else
        ++finished;
    }
    poll();
    deadline.check("the server's RDMA WRITE reply");
  }
  m.ops = m.latencies_usec.size();
  return m;
}

void PollEngine::serve(uint64_t size) {
  const TestInfo& test = o_.test_info();
  if (test.verb == Verb::write && !test.bandwidth) return serve_write_pingpong(size);
  if (test.verb == Verb::send && !test.bandwidth) return serve_send_pingpong(size);
  // One-sided operations need nothing from this side; SENDs only the receives poll() posts.
  wait_for_messages("the client to finish (its DONE message)");
}

void PollEngine::serve_write_pingpong(uint64_t size) {
  Deadline deadline(o_.timeout());
  while (!all_have_messages()) {
    for (size_t p = 0; p < w_.peers.size(); ++p) {
      std::byte& marker = w_.peers[p].slot.data()[size - 1];
      if (load_marker(marker) != ping_marker(rounds_[p])) continue;
      store_marker(marker, pong_marker(rounds_[p]));
      start(p, size, deadline);
      ++rounds_[p];
      deadline.progress();
    }
    if (poll() > 0) deadline.progress();
    deadline.check("the client's RDMA WRITE ping or its DONE message");
  }
}

void PollEngine::serve_send_pingpong(uint64_t size) {
  Deadline deadline(o_.timeout());
  while (!all_have_messages()) {
    if (poll() > 0) deadline.progress();
    for (size_t p = 0; p < w_.peers.size(); ++p) {
      while (answered_[p] < w_.peers[p].data_received && queue(p, size)) ++answered_[p];
      if (qps_[p].queued() > 0) post(p);
    }
    deadline.check("the client's SEND ping or its DONE message");
  }
}

}  // namespace

std::unique_ptr<Engine> make_poll_engine(Worker& worker, const PerfOptions& options) {
  return std::make_unique<PollEngine>(worker, options);
}

}  // namespace rdmakit::tool

// The sequence of a run, the same for both engines: the server sends GO for a size, plays
// its part and takes the client's DONE; the client's threads wait for GO, start together,
// measure, combine what they measured and send it back in DONE.
#include <algorithm>
#include <array>
#include <memory>
#include <mutex>
#include <thread>

#include "bounded.hpp"
#include "perf.hpp"
#include "perf_engine.hpp"
#include "perf_report.hpp"
#include "progress.hpp"
#include "rendezvous.hpp"

namespace rdmakit::tool {
namespace {

std::unique_ptr<Engine> make_engine(Worker& worker, const PerfOptions& o) {
  return o.mode == Mode::poll ? make_poll_engine(worker, o) : make_coroutine_engine(worker, o);
}

SizeResult summarize(const PerfOptions& o, uint64_t size, std::span<const Measurement> threads) {
  SizeResult r;
  r.size = size;
  r.iterations = o.iters;
  if (o.test_info().bandwidth) {
    // The peak is taken over a tenth of the run, and never fewer operations than fill
    // every QP's queue once.
    const uint64_t total = uint64_t{o.iters} * o.qps;
    r.bw = bandwidth(threads, size, std::max<uint64_t>(uint64_t{o.tx_depth} * o.qps, total / 10));
  } else {
    r.lat = latency(threads);
  }
  return r;
}

// send_bw: DONE follows a size's SENDs on each QP, so by then every one was received.
void check_sends(const PerfOptions& o, Worker& w, std::vector<uint64_t>& counted, uint64_t size) {
  for (size_t p = 0; p < w.peers.size(); ++p) {
    const uint64_t got = w.peers[p].data_received - counted[p];
    counted[p] = w.peers[p].data_received;
    if (got != o.iters)
      throw PerfError("QP " + std::to_string(w.peers[p].index) + ": received " +
                      std::to_string(got) + " SENDs of " + std::to_string(size) +
                      " bytes, expected " + std::to_string(o.iters));
  }
}

void run_server(const PerfOptions& o, Report& report) {
  report.waiting_for_client();
  Worker w = accept_peers(o);
  report.header({&w, 1});
  const std::unique_ptr<Engine> engine = make_engine(w, o);
  std::vector<uint64_t> counted(w.peers.size());
  std::array<std::byte, kControlBytes> go{};
  for (const uint64_t size : o.sizes()) {
    engine->send_to_all(MessageKind::go, std::span(go).first(encode_go(size, go)));
    engine->serve(size);
    if (o.test_info().bandwidth && o.test_info().verb == Verb::send)
      check_sends(o, w, counted, size);
    const SizeResult result = decode_done(*w.peers.front().message);
    if (result.size != size)
      throw PerfError("protocol error: the client reports size " + std::to_string(result.size) +
                      " instead of " + std::to_string(size));
    for (Peer& p : w.peers) {
      decode_done(*p.message);
      p.message.reset();
    }
    report.row(result);
  }
  report.footer();
}

// One client thread: its QPs through every size.
void run_client_thread(const PerfOptions& o, Worker& w, Rendezvous& meet,
                       std::vector<Measurement>& measured, size_t t, SizeResult& combined,
                       Report& report, Progress& progress) {
  const std::unique_ptr<Engine> engine = make_engine(w, o);
  std::array<std::byte, kControlBytes> done{};
  const std::vector<uint64_t> sizes = o.sizes();
  for (size_t step = 0; step < sizes.size(); ++step) {
    const uint64_t size = sizes[step];
    if (t == 0) progress.step(step, std::to_string(size) + " B");
    engine->wait_for_messages("the server's GO message");
    for (Peer& p : w.peers) {
      if (decode_go(*p.message) != size)
        throw PerfError("protocol error: the server runs size " +
                        std::to_string(decode_go(*p.message)) + " instead of " +
                        std::to_string(size));
      p.message.reset();
    }
    meet.arrive(nullptr, o.timeout());
    measured[t] = engine->measure(size);
    meet.arrive(
        [&] {
          combined = summarize(o, size, measured);
          progress.print_above([&] { report.row(combined); });
        },
        o.timeout());
    if (size == sizes.back()) engine->expect_close();
    engine->send_to_all(MessageKind::done, std::span(done).first(encode_done(combined, done)));
  }
}

void run_client(const PerfOptions& o, Report& report) {
  std::vector<Worker> workers = connect_peers(o);
  report.header(workers);
  Rendezvous meet(workers.size());
  // Gone (its line erased) before the footer or an error is printed.
  auto progress = std::make_unique<Progress>(std::string("rdmakit perf ") + o.test_info().name,
                                             o.sizes().size());
  std::vector<Measurement> measured(workers.size());
  SizeResult combined;
  std::mutex mutex;
  std::string first_error;
  auto body = [&](size_t t) {
    try {
      run_client_thread(o, workers[t], meet, measured, t, combined, report, *progress);
    } catch (const std::exception& e) {
      {
        std::lock_guard lock(mutex);
        // The first failure is the cause; the others only noticed it.
        if (first_error.empty()) first_error = e.what();
      }
      meet.fail();
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < workers.size(); ++t) threads.emplace_back(body, t);
  body(0);
  for (std::thread& t : threads) t.join();
  progress.reset();
  if (!first_error.empty()) throw PerfError(first_error);
  report.footer();
}

}  // namespace

void run_perf(const PerfOptions& o) {
  Report report(o);
  if (o.server())
    run_server(o, report);
  else
    run_client(o, report);
}

}  // namespace rdmakit::tool

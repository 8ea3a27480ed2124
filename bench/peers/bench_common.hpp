// Shared by the peer benchmarks: the workload (latency at depth 1 or rate at depth D, with a
// warm-up), timing, and the one JSON line each run prints for bench/rpc_vs_peers.py.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace rdmakit::bench {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string test = "latency";  // latency | rate
  std::string where;             // endpoint, transport name
  unsigned depth = 1;
  size_t size = 32;
  double seconds = 2.0;
};

inline Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--test")
      a.test = v;
    else if (k == "--where")
      a.where = v;
    else if (k == "--depth")
      a.depth = static_cast<unsigned>(std::atoi(v.c_str()));
    else if (k == "--size")
      a.size = static_cast<size_t>(std::atol(v.c_str()));
    else if (k == "--seconds")
      a.seconds = std::atof(v.c_str());
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (a.test == "latency") a.depth = 1;
  return a;
}

// Records completions: every round trip of a latency run, and the count of a rate run,
// after a warm-up of a tenth of the run.
class Meter {
 public:
  explicit Meter(const Args& a) : args_(a), start_(Clock::now()) {
    measure_from_ = start_ + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(a.seconds * 0.1));
    until_ = measure_from_ +
             std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds));
  }
  // One completed call that started at `started` (latency runs time each call).
  void done(Clock::time_point started) {
    const Clock::time_point now = Clock::now();
    if (now < measure_from_) return;
    if (calls_ == 0) first_ = now;
    last_ = now;
    ++calls_;
    if (args_.test == "latency")
      rtts_.push_back(std::chrono::duration<double, std::micro>(now - started).count());
  }
  // A batch of completions (rate runs).
  void done_many(uint64_t n) {
    const Clock::time_point now = Clock::now();
    if (now < measure_from_) return;
    if (calls_ == 0) first_ = now;
    last_ = now;
    calls_ += n;
  }
  bool finished() const { return Clock::now() >= until_; }

  void print(const std::string& system) {
    const double secs = std::chrono::duration<double>(last_ - first_).count();
    std::sort(rtts_.begin(), rtts_.end());
    auto pct = [&](double p) {
      return rtts_.empty()
                 ? 0.0
                 : rtts_[std::min(rtts_.size() - 1,
                                  static_cast<size_t>(p * static_cast<double>(rtts_.size())))];
    };
    std::printf(
        "{\"system\":\"%s\",\"where\":\"%s\",\"test\":\"%s\",\"depth\":%u,\"size\":%zu,"
        "\"calls\":%llu,\"calls_per_second\":%.1f,\"latency_us\":{\"median\":%.3f,\"p99\":%.3f}}\n",
        system.c_str(), args_.where.c_str(), args_.test.c_str(), args_.depth, args_.size,
        static_cast<unsigned long long>(calls_),
        secs > 0 ? static_cast<double>(calls_) / secs : 0.0, pct(0.5), pct(0.99));
    std::fflush(stdout);
  }

 private:
  Args args_;
  Clock::time_point start_, measure_from_, until_, first_{}, last_{};
  uint64_t calls_ = 0;
  std::vector<double> rtts_;
};

}  // namespace rdmakit::bench

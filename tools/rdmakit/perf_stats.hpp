// What one size of a test measured, and the figures the report shows.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

namespace rdmakit::tool {

using Clock = std::chrono::steady_clock;

// Operations a poll (or a coroutine) saw complete at `time`.
struct Completions {
  Clock::time_point time;
  uint32_t ops;
};

// The raw measurement of one thread for one size.
struct Measurement {
  Clock::time_point start{}, end{};
  std::vector<Completions> completions;  // bandwidth tests
  std::vector<double> latencies_usec;    // latency tests, one per operation or round trip
  uint64_t ops = 0;
};

struct BwFigures {
  double peak_mib = 0, avg_mib = 0, msg_rate_mpps = 0;
};

struct LatFigures {
  double min = 0, max = 0, typical = 0, avg = 0, stdev = 0, p99 = 0, p999 = 0;  // usec
};

// One row of the report.
struct SizeResult {
  uint64_t size = 0;
  uint64_t iterations = 0;  // per QP
  BwFigures bw;             // bandwidth tests
  LatFigures lat;           // latency tests
};

// Bandwidth of the threads' measurements together: the average over the whole run and the
// peak, the best rate over any `window` consecutive operations.
BwFigures bandwidth(std::span<const Measurement> threads, uint64_t size, uint64_t window);
// Latency figures over every sample of every thread.
LatFigures latency(std::span<const Measurement> threads);

}  // namespace rdmakit::tool

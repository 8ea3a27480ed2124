#include "perf_stats.hpp"

#include <algorithm>
#include <cmath>

namespace rdmakit::tool {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// The sample at fraction `q` of the sorted samples (nearest rank).
double percentile(const std::vector<double>& sorted, double q) {
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

}  // namespace

BwFigures bandwidth(std::span<const Measurement> threads, uint64_t size, uint64_t window) {
  BwFigures out;
  if (threads.empty()) return out;
  Clock::time_point start = threads.front().start, end = threads.front().end;
  uint64_t ops = 0;
  std::vector<Completions> merged;
  for (const Measurement& m : threads) {
    start = std::min(start, m.start);
    end = std::max(end, m.end);
    ops += m.ops;
    merged.insert(merged.end(), m.completions.begin(), m.completions.end());
  }
  const double elapsed = seconds(end - start);
  if (ops == 0 || elapsed <= 0) return out;
  const double bytes_per_op = static_cast<double>(size);
  out.avg_mib = static_cast<double>(ops) * bytes_per_op / kMiB / elapsed;
  out.msg_rate_mpps = static_cast<double>(ops) / elapsed / 1e6;

  // Threads complete concurrently: their completions form one timeline starting at `start`.
  std::stable_sort(merged.begin(), merged.end(),
                   [](const Completions& a, const Completions& b) { return a.time < b.time; });
  std::vector<Clock::time_point> at{start};
  std::vector<uint64_t> done{0};
  for (const Completions& c : merged) {
    at.push_back(c.time);
    done.push_back(done.back() + c.ops);
  }
  double best = 0;
  size_t first = 0;
  for (size_t last = 1; last < at.size(); ++last) {
    // The shortest stretch ending at `last` that covers `window` operations.
    while (first + 1 < last && done[last] - done[first + 1] >= window) ++first;
    const uint64_t covered = done[last] - done[first];
    const double span = seconds(at[last] - at[first]);
    if (covered >= window && span > 0) best = std::max(best, static_cast<double>(covered) / span);
  }
  out.peak_mib = std::max(best * bytes_per_op / kMiB, out.avg_mib);
  return out;
}

LatFigures latency(std::span<const Measurement> threads) {
  std::vector<double> all;
  for (const Measurement& m : threads)
    all.insert(all.end(), m.latencies_usec.begin(), m.latencies_usec.end());
  LatFigures out;
  if (all.empty()) return out;
  std::sort(all.begin(), all.end());
  double sum = 0;
  for (double v : all) sum += v;
  out.avg = sum / static_cast<double>(all.size());
  double squares = 0;
  for (double v : all) squares += (v - out.avg) * (v - out.avg);
  out.stdev = std::sqrt(squares / static_cast<double>(all.size()));
  out.min = all.front();
  out.max = all.back();
  out.typical = all[all.size() / 2];
  out.p99 = percentile(all, 0.99);
  out.p999 = percentile(all, 0.999);
  return out;
}

}  // namespace rdmakit::tool

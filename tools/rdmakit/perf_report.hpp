// What `rdmakit perf` prints: perftest's layout (a settings block between dashed lines, then
// one row per size), or one JSON object per size (--json on stdout, --output to a file).
#pragma once

#include <fstream>
#include <span>

#include "perf_options.hpp"
#include "perf_session.hpp"
#include "perf_stats.hpp"

namespace rdmakit::tool {

class Report {
 public:
  // Opens --output. Throws PerfError if it cannot be written.
  explicit Report(const PerfOptions& options);

  void waiting_for_client() const;
  // The settings and the connections; `workers` are this side's.
  void header(std::span<const Worker> workers) const;
  void row(const SizeResult& result);
  void footer() const;

 private:
  bool table() const { return !o_.json; }
  const PerfOptions& o_;
  std::ofstream file_;
};

}  // namespace rdmakit::tool

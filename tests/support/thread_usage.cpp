#include "support/thread_usage.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace rdmakit::testing {

std::optional<ThreadUsage> usage_of_threads(std::string_view prefix) {
  std::optional<ThreadUsage> total;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::string line;
    if (!std::getline(std::ifstream(task.path() / "comm"), line) || !line.starts_with(prefix))
      continue;
    ThreadUsage& u = total ? *total : total.emplace();
    constexpr std::string_view kKey = "voluntary_ctxt_switches:";
    std::ifstream status(task.path() / "status");
    while (std::getline(status, line))
      if (line.starts_with(kKey)) u.wakeups += std::stoull(line.substr(kKey.size()));
    std::getline(std::ifstream(task.path() / "stat"), line);
    // The fields after the name (which ends with the last ')'): utime and stime are the
    // 12th and 13th of them.
    std::istringstream fields(line.substr(line.rfind(')') + 2));
    std::string field;
    for (int i = 1; i <= 13 && fields >> field; ++i)
      if (i >= 12) u.cpu_ticks += std::stoull(field);
  }
  return total;
}

}  // namespace rdmakit::testing

#include "support/json_lines.hpp"

#include <sstream>

namespace rdmakit::testing {

nlohmann::json last_json(const std::string& output) {
  std::istringstream lines(output);
  nlohmann::json last;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.front() == '{') last = nlohmann::json::parse(line);
  }
  return last;
}

}  // namespace rdmakit::testing

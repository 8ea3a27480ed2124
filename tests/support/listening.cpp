#include "support/listening.hpp"

#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace rdmakit::testing {
namespace {

bool listening_in(const std::string& table, int port) {
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string slot, local, remote, state;
    f >> slot >> local >> remote >> state;
    const auto colon = local.rfind(':');
    if (colon == std::string::npos) continue;
    if (std::stoi(local.substr(colon + 1), nullptr, 16) == port && state == "0A") return true;
  }
  return false;
}

}  // namespace

bool wait_listening(int port, std::chrono::milliseconds limit, int pid) {
  const std::string dir = pid ? "/proc/" + std::to_string(pid) + "/net/" : "/proc/net/";
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (listening_in(dir + "tcp", port) || listening_in(dir + "tcp6", port)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace rdmakit::testing

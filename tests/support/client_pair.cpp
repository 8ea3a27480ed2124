#include "support/client_pair.hpp"

#include <gtest/gtest.h>

#include "support/listening.hpp"
#include "support/subprocess.hpp"

using namespace std::chrono_literals;

namespace rdmakit::testing {
namespace {

std::string expand(std::string s, int port, const std::string& server) {
  for (auto [key, value] : {std::pair<std::string, std::string>{"{port}", std::to_string(port)},
                            {"{server}", server}}) {
    for (size_t at; (at = s.find(key)) != std::string::npos;) s.replace(at, key.size(), value);
  }
  return s;
}

std::vector<std::string> command(const std::vector<std::string>& prefix, const std::string& line) {
  std::vector<std::string> argv = prefix;
  argv.push_back(SOFTRDMA_RUN);
  for (auto& w : words(line)) argv.push_back(w);
  return argv;
}

// perftest times a run with the CPU's cycle counter, whose rate it calibrates against the
// wall clock at the end; on a loaded machine that calibration can fail ("Correlation
// coefficient r^2: ... < 0.9"), and perftest then exits 1 after the transfers completed.
bool perftest_clock_failed(const Exit& e) {
  return e.output.find("Correlation coefficient r^2") != std::string::npos &&
         e.output.find("Can't produce a report") != std::string::npos;
}

}  // namespace

PairCase same_program(const std::string& name, const std::string& program_and_args) {
  return {name, program_and_args + " -p {port}", program_and_args + " -p {port} {server}"};
}

PairOutput run_pair(const PairCase& c, Placement where, const TwoHosts* hosts,
                    const std::vector<std::string>& extra_env) {
  const bool netns = where != Placement::kThisHost;
  if (netns && !(hosts && hosts->ok())) {
    ADD_FAILURE() << "no network namespaces";
    return {};
  }
  const std::string server_addr = netns ? hosts->address(0) : "127.0.0.1";
  const std::vector<std::string> none;
  const auto& server_ns = netns ? hosts->on(0) : none;
  const auto& client_ns = where == Placement::kTwoHosts ? hosts->on(1) : server_ns;
  // Once more only when perftest's own clock calibration failed, never for anything else.
  for (int attempt = 0;; ++attempt) {
    const int port = c.fixed_port ? c.fixed_port : free_tcp_port();
    Process server(command(server_ns, expand(c.server, port, server_addr)), extra_env);
    if (!wait_listening(port, 10s, netns ? server.pid() : 0)) {
      ADD_FAILURE() << "server did not listen";
      return {};
    }
    auto client = run(command(client_ns, expand(c.client, port, server_addr)), 120s, extra_env);
    auto served = server.wait(30s);
    if (attempt == 0 && perftest_clock_failed(client)) continue;
    EXPECT_TRUE(client.ok()) << "client: " << client.describe();
    EXPECT_TRUE(served.ok()) << "server: " << served.describe();
    return {served.output, client.output};
  }
}

}  // namespace rdmakit::testing

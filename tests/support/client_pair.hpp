// Running a server program and a client program against each other, on softrdma, on one
// host or on two (network namespaces), bounded in time.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "support/two_hosts.hpp"

namespace rdmakit::testing {

/// Command lines with placeholders: {port} becomes a free port (or `fixed_port`), {server}
/// the server's address.
struct PairCase {
  std::string name;
  std::string server;
  std::string client;
  int fixed_port = 0;  // for programs whose port cannot be chosen (udaddy)
};

/// How gtest shows a case in a failure: by its name, not its bytes.
inline void PrintTo(const PairCase& c, std::ostream* os) {
  *os << c.name;
}

/// The usual form: the same program and options on both sides, the client naming the
/// server last (ibv_*_pingpong, perftest).
PairCase same_program(const std::string& name, const std::string& program_and_args);

/// Where the two programs run.
enum class Placement {
  kThisHost,     // this network namespace
  kPrivateHost,  // both in one network namespace of the test's own
  kTwoHosts,     // server and client in two namespaces joined by veth
};

/// What the two programs printed.
struct PairOutput {
  std::string server;
  std::string client;
};

/// Runs the pair, both with `extra_env` ("NAME=value") in their environment; adds test
/// failures when either side fails. `hosts` is needed for the namespace placements.
PairOutput run_pair(const PairCase& c, Placement where, const TwoHosts* hosts,
                    const std::vector<std::string>& extra_env = {});

}  // namespace rdmakit::testing

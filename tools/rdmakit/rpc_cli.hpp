// Command-line pieces the RPC tools (rpc-bench, kv) share.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <string>

#include "rdmakit/rpc/options.hpp"

namespace rdmakit::tool {

inline constexpr const char* kRpcUrlHelp =
    "inproc://NAME, shm://NAME, tcp://HOST:PORT, rc://HOST:PORT (RDMA RC over RDMA CM), "
    "rc+tcp://HOST:PORT (RDMA RC over a TCP exchange) or ud://HOST:PORT (RDMA UD)";

/// --mode busy_poll|blocking.
inline void add_mode_option(CLI::App& app, rpc::Mode& mode) {
  const std::map<std::string, rpc::Mode> modes{{"busy_poll", rpc::Mode::busy_poll},
                                               {"blocking", rpc::Mode::blocking}};
  // The option text names the words: rpc::Mode is a byte, which CLI11 would print as one.
  app.add_option("--mode", mode, "busy_poll (default) or blocking (sleep when idle)")
      ->transform(CLI::CheckedTransformer(modes, CLI::ignore_case).description(""))
      ->option_text("busy_poll|blocking");
}

}  // namespace rdmakit::tool

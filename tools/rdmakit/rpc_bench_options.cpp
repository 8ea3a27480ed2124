#include <map>

#include "rpc_bench.hpp"
#include "rpc_cli.hpp"

namespace rdmakit::tool {

void add_rpc_bench_options(CLI::App& app, RpcBenchOptions& o) {
  app.add_option("url", o.url, kRpcUrlHelp)->required();
  app.add_flag("--serve", o.serve, "only serve (until interrupted, or for --duration seconds)");
  app.add_flag("--local", o.local,
               "start the server in this process, on its own threads (implied by inproc://)");
  const std::map<std::string, RpcTest> tests{
      {"latency", RpcTest::latency}, {"rate", RpcTest::rate}, {"bandwidth", RpcTest::bandwidth}};
  app.add_option("-t,--test", o.test, "latency (default), rate or bandwidth")
      ->transform(CLI::CheckedTransformer(tests, CLI::ignore_case));
  app.add_option("-s,--size", o.size, "request bytes (default 32; bandwidth: 1048576)");
  app.add_option("-r,--response-size", o.response_size,
                 "response bytes (default: the request's size; bandwidth: 8)");
  app.add_option("-c,--clients", o.clients, "sessions per client thread")
      ->check(CLI::Range(1u, 4096u));
  app.add_option("-q,--depth", o.depth, "calls in flight per session")
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--threads", o.threads, "client threads (and server threads)")
      ->check(CLI::Range(1u, 64u));
  app.add_option("-D,--duration", o.duration, "seconds to measure (after a 10 % warm-up)")
      ->check(CLI::PositiveNumber);
  app.add_option("-n,--iterations", o.iterations, "latency: calls to time instead of a duration");
  add_mode_option(app, o.mode);
  app.add_option("--ring-bytes", o.ring_bytes,
                 "ring size per session and direction (shm, inproc, rc)");
  app.add_flag("--json", o.json, "one JSON object instead of the table");
}

}  // namespace rdmakit::tool

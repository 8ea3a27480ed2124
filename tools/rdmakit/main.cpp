// rdmakit: command-line tools built on the rdmakit library.
//   rdmakit perf <test> [server-host] [flags]   perftest's benchmarks
//   rdmakit devices [--json]                    devices, ports, GIDs and the GID chosen
//   rdmakit rpc-bench URL [flags]               RPC latency, rate and bandwidth
//   rdmakit kv URL [flags]                      key-value store benchmark, values checked
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "devices.hpp"
#include "kv_options.hpp"
#include "perf.hpp"
#include "perf_options.hpp"
#include "rpc_bench.hpp"

int main(int argc, char** argv) {
  using namespace rdmakit::tool;
  CLI::App app{"rdmakit: tools built on the rdmakit library"};
  app.require_subcommand(1);

  PerfOptions perf_options;
  CLI::App* perf = app.add_subcommand(
      "perf",
      "benchmark as perftest does: run without a host to be the server, then with the "
      "server's host to measure");
  add_perf_options(*perf, perf_options);

  DevicesOptions devices_options;
  CLI::App* devices = app.add_subcommand("devices", "list devices, ports, GIDs and the GID chosen");
  add_devices_options(*devices, devices_options);

  RpcBenchOptions rpc_options;
  CLI::App* rpc_bench = app.add_subcommand(
      "rpc-bench", "RPC latency, rate and bandwidth over any rpc URL (inproc, shm, tcp, rc, ud)");
  add_rpc_bench_options(*rpc_bench, rpc_options);

  KvOptions kv_options;
  CLI::App* kv = app.add_subcommand(
      "kv", "key-value store benchmark (GET/PUT/DELETE, one-sided GETs), every value checked");
  add_kv_options(*kv, kv_options);

  try {
    app.parse(argc, argv);
    if (*perf) finish_perf_options(perf_options);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (*perf) run_perf(perf_options);
    if (*devices) run_devices(devices_options);
    if (*rpc_bench) run_rpc_bench(rpc_options);
    if (*kv) run_kv(kv_options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdmakit %s: %s\n", app.get_subcommands().front()->get_name().c_str(),
                 e.what());
    return 1;
  }
  return 0;
}

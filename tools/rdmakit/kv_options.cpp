#include <map>

#include "kv_options.hpp"
#include "rpc_cli.hpp"

namespace rdmakit::tool {

void add_kv_options(CLI::App& app, KvOptions& o) {
  app.add_option("url", o.url, kRpcUrlHelp)->required();
  app.add_flag("--serve", o.serve, "only serve (until interrupted, or for --duration seconds)");
  app.add_flag("--local", o.local, "start the server on a thread of this process");
  app.add_option("-k,--keys", o.keys, "keys 0 .. N-1 (the server's table holds N)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 26))
      ->capture_default_str();
  app.add_option("-s,--value-size", o.value_size, "value bytes (the server's: the largest)")
      ->check(CLI::Range(8u, 4096u))
      ->capture_default_str();
  const std::map<std::string, kv::Distribution> distributions{
      {"uniform", kv::Distribution::uniform}, {"zipf", kv::Distribution::zipf}};
  app.add_option("--distribution", o.distribution, "uniform (default) or zipf")
      ->transform(CLI::CheckedTransformer(distributions, CLI::ignore_case));
  app.add_option("--zipf-theta", o.zipf_theta, "skew of --distribution zipf")
      ->check(CLI::Range(0.01, 0.999))
      ->capture_default_str();
  app.add_option("-r,--read-ratio", o.read_ratio, "percent of operations that are GETs")
      ->check(CLI::Range(0u, 100u))
      ->capture_default_str();
  app.add_option("--delete-ratio", o.delete_ratio, "percent of writes that are DELETEs")
      ->check(CLI::Range(0u, 100u))
      ->capture_default_str();
  app.add_option("-c,--clients", o.clients, "client threads, each with its own endpoint")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  app.add_option("-q,--depth", o.depth, "operations in flight per client")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  app.add_option("-D,--duration", o.duration,
                 "seconds to measure (default 2); --serve: seconds to serve (default: forever)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--one-sided", o.one_sided,
               "GETs read the server's table with RDMA READ (PUT and DELETE still call it)");
  app.add_option("--rdma-host", o.rdma_host,
                 "--one-sided: the server's address for RDMA (default: the URL's host)");
  app.add_option("--rdma-port", o.rdma_port,
                 "--serve: TCP port where RDMA connections are accepted (default: any)");
  add_mode_option(app, o.mode);
  app.add_option("--seed", o.seed, "seed of the workload's random choices")->capture_default_str();
  app.add_flag("--json", o.json, "one JSON object instead of the table");
}

}  // namespace rdmakit::tool

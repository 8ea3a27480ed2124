// `rdmakit kv`: a key-value store benchmark over any rdmakit rpc transport URL.
//   rdmakit kv URL --serve [-D SECONDS]     serve a table until interrupted (or for -D)
//   rdmakit kv URL [flags]                  preload every key, then run the workload against
//                                           a running server and check every value read
//   rdmakit kv URL --local [flags]          the same with the server on a thread of this
//                                           process (implied by inproc://)
// --one-sided: GETs read the server's table with RDMA READ instead of calling it.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "kv_workload.hpp"
#include "rdmakit/rpc/options.hpp"

namespace rdmakit::tool {

struct KvOptions {
  std::string url;
  bool serve = false;
  bool local = false;
  uint64_t keys = 100'000;
  uint32_t value_size = 64;  // the client's values; the server's largest value
  kv::Distribution distribution = kv::Distribution::uniform;
  double zipf_theta = 0.99;
  uint32_t read_ratio = 95;    // percent of operations that are GETs
  uint32_t delete_ratio = 10;  // percent of writes that are DELETEs
  uint32_t clients = 1;        // client threads, one endpoint each
  uint32_t depth = 1;          // operations in flight per client
  double duration = 0;         // 0: client 2 s, server until interrupted
  bool one_sided = false;
  std::string rdma_host;   // where the client connects for RDMA READ (default: the URL's host)
  uint16_t rdma_port = 0;  // where the server accepts them (0: any free port)
  rpc::Mode mode = rpc::Mode::busy_poll;
  uint64_t seed = 1;
  bool json = false;
};

void add_kv_options(CLI::App& app, KvOptions& options);
// Throws when the run failed or read a wrong value (after printing the report).
void run_kv(KvOptions& options);

}  // namespace rdmakit::tool

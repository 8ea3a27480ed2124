// Instructions per RPC, client and server together, counted by callgrind: one thread drives
// a server and a client endpoint in turn, with `depth` calls in flight, for `calls` calls.
// Run under `valgrind --tool=callgrind` by bench/rpc_vs_peers.py; the figure is steady where
// times on this machine are not.
//   rpc_call_cost URL CALLS DEPTH [SIZE]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rdmakit/rpc/client.hpp"
#include "rdmakit/rpc/server.hpp"

using namespace rdmakit;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: rpc_call_cost URL CALLS DEPTH [SIZE]\n");
    return 2;
  }
  const std::string url = argv[1];
  const long calls = std::atol(argv[2]);
  const auto depth = static_cast<uint32_t>(std::atol(argv[3]));
  const size_t size = argc > 4 ? static_cast<size_t>(std::atol(argv[4])) : 32;
  rpc::Options options;
  options.window = depth;
  rpc::Server server = rpc::Server::listen(url, options);
  rpc::Client client = rpc::Client::connect(server.url(), options);
  const std::vector<std::byte> request(size, std::byte{1});
  rpc::CallOptions call;
  call.max_response = static_cast<uint32_t>(size);
  long issued = 0;
  long answered = 0;
  auto on_response = [&](const rpc::Response& r) {
    if (!r.status.ok()) std::abort();
    ++answered;
    if (issued < calls && client.call(request, 0, call).ok()) ++issued;
  };
  for (uint32_t i = 0; i < depth && issued < calls; ++i)
    issued += client.call(request, 0, call).ok();
  while (answered < calls) {
    client.poll(on_response);
    server.poll();
    while (auto h = server.recv()) {
      const std::span<const std::byte> in = h->data();
      std::move(*h).reply(in);
    }
  }
  std::printf("%ld calls answered\n", answered);
  return 0;
}

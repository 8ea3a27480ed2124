// A peer for multi-process tests: accepts one connection (TCP or RDMA CM back end), offers a
// 1 MiB registered buffer through the handshake's user data, prints "ready" and waits to be
// killed (at most 60 s). Usage: rdmakit_test_peer tcp|cm <port>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "rdmakit/cm_connection.hpp"
#include "rdmakit/tcp_connection.hpp"

using namespace rdmakit;

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const std::string backend = argv[1];
  const auto port = static_cast<uint16_t>(std::atoi(argv[2]));
  ResourceOptions res_options;
  res_options.for_rdma_cm = backend == "cm";
  auto resources = Resources::open(res_options);
  std::vector<std::byte> memory(1 << 20);
  MemoryRegion mr = resources->pd.register_memory(memory.data(), memory.size(), Access::all);
  ConnectionOptions options;
  options.user_data.resize(RemoteBuffer::kWireSize);
  mr.remote().encode(std::span<std::byte, RemoteBuffer::kWireSize>(options.user_data));
  Connection connection;
  if (backend == "cm") {
    CmAcceptor acceptor(resources, "0.0.0.0", port, options);
    std::printf("listening\n");
    std::fflush(stdout);
    connection = acceptor.accept();
  } else {
    TcpAcceptor acceptor(resources, "0.0.0.0", port, options);
    std::printf("listening\n");
    std::fflush(stdout);
    connection = acceptor.accept();
  }
  std::printf("ready %s\n", connection.summary().c_str());
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return 0;
}

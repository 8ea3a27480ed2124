// The smallest complete rdmakit program: one process offers a registered buffer, another
// writes into it with one-sided RDMA WRITE. Walked through in docs/library.md.
//
//   build/softrdma-run build/examples/first_write server 7471 &
//   build/softrdma-run build/examples/first_write client 127.0.0.1 7471
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "rdmakit/async_queue_pair.hpp"
#include "rdmakit/poller.hpp"
#include "rdmakit/tcp_connection.hpp"

using namespace rdmakit;

constexpr char kMessage[] = "hello over RDMA";

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: first_write server PORT | first_write client HOST PORT\n");
    return 2;
  }
  const bool server = std::string(argv[1]) == "server";
  auto resources = Resources::open();  // softrdma0 (or RDMAKIT_DEVICE), PD, one CQ
  std::printf("%s\n", resources->context.gid().summary.c_str());

  // 4 KiB of registered memory on each side.
  std::vector<std::byte> memory(4096);
  MemoryRegion mr = resources->pd.register_memory(memory.data(), memory.size(), Access::all);

  if (server) {
    // The buffer's address and rkey travel to the client in the handshake's user data.
    ConnectionOptions options;
    options.user_data.resize(RemoteBuffer::kWireSize);
    mr.remote().encode(std::span<std::byte, RemoteBuffer::kWireSize>(options.user_data));
    TcpAcceptor acceptor(resources, "0.0.0.0", static_cast<uint16_t>(std::atoi(argv[2])), options);
    Connection connection = acceptor.accept();
    std::printf("server: %s\n", connection.summary().c_str());
    // The write needs nothing from this side: wait until the bytes appear. A WRITE lands in
    // address order (ConnectX and softrdma alike), so once the message's last character is
    // there, all of it is; its first byte could show while the rest is still on its way.
    std::atomic_ref<std::byte> last(memory[sizeof kMessage - 2]);
    for (int i = 0; i < 5000 && last.load(std::memory_order_acquire) == std::byte{0}; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::printf("server: received \"%s\"\n", reinterpret_cast<const char*>(memory.data()));
    return last.load(std::memory_order_acquire) == std::byte{0};
  }

  TcpConnector connector(resources);
  Connection connection = connector.connect(argv[2], static_cast<uint16_t>(std::atoi(argv[3])));
  std::printf("client: %s\n", connection.summary().c_str());
  const RemoteBuffer remote = RemoteBuffer::decode(
      std::span<const std::byte, RemoteBuffer::kWireSize>(connection.peer_data()));

  std::memcpy(memory.data(), kMessage, sizeof kMessage);
  Poller poller(resources->cq);
  AsyncQueuePair qp(poller, connection.qp());
  std::error_code result;
  auto write = [&]() -> Task<void> {
    result = co_await qp.write(mr.local().first(sizeof kMessage), remote.first(sizeof kMessage));
  };
  Task<void> task = write();
  task.start();
  while (!task.done()) poller.poll();  // busy-poll on this thread; see Poller::wait for sleeping
  std::printf("client: write %s\n", result ? result.message().c_str() : "done");
  return result ? 1 : 0;
}

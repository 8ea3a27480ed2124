// The server of `rdmakit kv`: a KvTable in memory registered on the device's PD, served over
// an rdmakit rpc endpoint (any URL) by the thread that calls serve(). For one-sided GETs it
// grants clients read access to the table (DESCRIBE) and accepts their RDMA connections on a
// thread of its own; it then does nothing for their READs.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "kv_protocol.hpp"
#include "kv_table.hpp"
#include "rdmakit/allocator.hpp"
#include "rdmakit/grant.hpp"
#include "rdmakit/rpc/server.hpp"
#include "rdmakit/tcp_connection.hpp"

namespace rdmakit::tool::kv {

struct ServerConfig {
  std::string url;
  uint64_t keys = 0;
  uint32_t value_capacity = 0;
  uint16_t rdma_port = 0;  // 0: any free port
  rpc::Mode mode = rpc::Mode::busy_poll;
};

struct ServerCounters {
  uint64_t served = 0;
  uint64_t refused = 0;  // malformed requests answered with an error status
};

class Server {
 public:
  // Registers the table, listens on the URL and starts accepting RDMA connections. Throws.
  explicit Server(const ServerConfig& config);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The URL clients connect to (with the real port when listening on port 0).
  const std::string& url() const noexcept { return rpc_.url(); }
  uint16_t rdma_port() const noexcept { return acceptor_.port(); }
  const TableLayout& layout() const noexcept { return table_.layout(); }

  // Serves on the calling thread (the endpoint's from now on) until `stop`.
  void serve(const std::atomic<bool>& stop);
  const ServerCounters& counters() const noexcept { return counters_; }

 private:
  void answer(rpc::RecvHandle request);
  void describe(rpc::RecvHandle request, const Request& r);
  void accept_loop();

  ServerConfig config_;
  Limits limits_;
  std::shared_ptr<Resources> resources_;
  RawRegion memory_;
  KvTable table_;
  GrantTable grants_;
  TcpAcceptor acceptor_;
  std::mutex mutex_;
  std::deque<Connection> connections_;  // clients' RDMA connections, the newest kept
  std::atomic<bool> stopping_{false};
  rpc::Server rpc_;
  std::thread acceptor_thread_;  // started last: nothing after it may throw
  uint32_t next_writer_ = 1;
  ServerCounters counters_;
};

}  // namespace rdmakit::tool::kv

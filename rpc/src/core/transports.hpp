// The transports, chosen by a URL's scheme: inproc://NAME, shm://NAME, tcp://HOST:PORT,
// rc://HOST:PORT (RDMA RC, connected through RDMA CM), rc+tcp://HOST:PORT (RDMA RC,
// connected through rdmakit's TCP exchange) and ud://HOST:PORT (RDMA UD datagrams).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include "core/link.hpp"

namespace rdmakit::rpc::detail {

class Engine;

using ListenFn = std::unique_ptr<Listener> (*)(const std::string& address, Engine& engine,
                                               std::error_code& error);
using ConnectFn = std::unique_ptr<Link> (*)(const std::string& address, Engine& engine,
                                            std::error_code& error);

std::unique_ptr<Listener> listen_inproc(const std::string& name, Engine&, std::error_code&);
std::unique_ptr<Link> connect_inproc(const std::string& name, Engine&, std::error_code&);
std::unique_ptr<Listener> listen_shm(const std::string& name, Engine&, std::error_code&);
std::unique_ptr<Link> connect_shm(const std::string& name, Engine&, std::error_code&);
std::unique_ptr<Listener> listen_tcp(const std::string& host_port, Engine&, std::error_code&);
std::unique_ptr<Link> connect_tcp(const std::string& host_port, Engine&, std::error_code&);
std::unique_ptr<Listener> listen_rc(const std::string& host_port, Engine&, std::error_code&);
std::unique_ptr<Link> connect_rc(const std::string& host_port, Engine&, std::error_code&);
std::unique_ptr<Listener> listen_rc_tcp(const std::string& host_port, Engine&, std::error_code&);
std::unique_ptr<Link> connect_rc_tcp(const std::string& host_port, Engine&, std::error_code&);
std::unique_ptr<Listener> listen_ud(const std::string& host_port, Engine&, std::error_code&);
std::unique_ptr<Link> connect_ud(const std::string& host_port, Engine&, std::error_code&);

struct Transport {
  ListenFn listen;
  ConnectFn connect;
};
/// The transport of `url` and the address after "scheme://"; nullptr for an unknown scheme.
const Transport* transport_for(std::string_view url, std::string& address) noexcept;

}  // namespace rdmakit::rpc::detail

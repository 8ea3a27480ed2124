#include "rpc_connect.hpp"

#include <chrono>
#include <optional>
#include <stdexcept>
#include <thread>

namespace rdmakit::tool {

using namespace std::chrono_literals;

rpc::Client connect_retrying(const std::string& url, const rpc::Options& options) {
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  for (;;) {
    std::error_code error;
    if (std::optional<rpc::Client> c = rpc::Client::connect(url, options, error))
      return std::move(*c);
    if (error != rpc::Errc::not_listening || std::chrono::steady_clock::now() > give_up)
      throw std::runtime_error("connect " + url + ": " + error.message());
    std::this_thread::sleep_for(10ms);
  }
}

}  // namespace rdmakit::tool

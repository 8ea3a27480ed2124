// Connecting an RPC client to a server that may still be starting (rpc-bench, kv).
#pragma once

#include <string>

#include "rdmakit/rpc/client.hpp"

namespace rdmakit::tool {

/// Connects to `url`, retrying for up to 5 s while nothing listens there yet; throws
/// std::runtime_error naming the URL on any other error or when the time is up.
rpc::Client connect_retrying(const std::string& url, const rpc::Options& options);

}  // namespace rdmakit::tool

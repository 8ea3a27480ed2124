// Waiting for a server to listen, without connecting to it (servers that accept once).
#pragma once

#include <chrono>

namespace rdmakit::testing {

/// True once some socket listens on TCP `port` (any address), false after `limit`.
bool wait_listening(int port, std::chrono::milliseconds limit);

}  // namespace rdmakit::testing

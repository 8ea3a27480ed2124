// Waiting for a server to listen, without connecting to it (servers that accept once).
#pragma once

#include <chrono>

namespace rdmakit::testing {

/// True once some socket listens on TCP `port` (any address), false after `limit`. With a
/// `pid`, looks in that process's network namespace instead of ours.
bool wait_listening(int port, std::chrono::milliseconds limit, int pid = 0);

}  // namespace rdmakit::testing

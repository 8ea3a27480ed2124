// The bounds both acceptors' accept_ready() keep, so that a server's event loop stays
// responsive however many clients arrive or stall at once.
#pragma once

#include <cstddef>

namespace rdmakit::detail {

/// Connections whose set-up is under way at once (TCP handshakes, or RDMA CM requests
/// answered and not yet established); a new client beyond it drops the oldest.
inline constexpr size_t kMostConnectionsInProgress = 64;
/// Arrivals (accepted sockets, or CM events) one call takes, so that one call stays short.
inline constexpr int kArrivalsPerCall = 16;

}  // namespace rdmakit::detail

// The local address that reaches a destination, as rdma_resolve_addr finds it: the route
// lookup of a UDP connect (which sends nothing), three system calls, a fifth of what
// resolving an address cost. Sources found are kept until the kernel announces a change
// of routes, addresses or links (netlink), which the CM thread watches; a lookup in the
// microseconds between a change and the thread's wake-up may still get the old source, as
// it would have just before the change.
#pragma once

#include <netinet/in.h>

#include <cstddef>

namespace softrdma::cm {

/// The source address that reaches `target` (port 0); 0 or an errno. Caller holds
/// cm_mutex.
int route_source(const sockaddr_in& target, sockaddr_in* source);

/// A descriptor readable when the kernel changed a route, address or link, or -1. The CM
/// thread watches it from now on (found sources are kept only while it does). Caller holds
/// cm_mutex.
int watch_route_changes();
/// Destinations whose source is kept now (at most a few thousand: beyond that the cache
/// starts again).
size_t remembered_sources();
/// Forgets the sources found and takes what made the descriptor readable. Caller holds
/// cm_mutex.
void routes_changed();

}  // namespace softrdma::cm

#include "cm/route_lookup.hpp"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <unordered_map>

#include "common/current_pid.hpp"

namespace softrdma::cm {
namespace {

struct Routes {
  pid_t owner = 0;
  // One UDP socket serves the lookups: disconnecting it (AF_UNSPEC) lets the next connect
  // choose its source anew, and costs less than a socket made and closed per lookup.
  int probe = -1;
  int probe_error = 0;   // why `probe` could not be made
  int changes = -1;      // netlink, subscribed to route, address and link changes
  bool watched = false;  // the CM thread watches `changes`: found sources may be kept
  std::unordered_map<uint32_t, uint32_t> source_of;  // by destination, network order
};

// Destinations whose source address is remembered at most.
constexpr size_t kMostRemembered = 4096;

// A forked child makes its own sockets (the parent's are shared with it) and forgets what
// the parent found until its own CM thread watches for changes.
Routes& routes() {
  static auto* r = new Routes();
  if (r->owner != current_pid()) {
    if (r->probe >= 0) close(r->probe);
    if (r->changes >= 0) close(r->changes);
    *r = Routes{};
    r->owner = current_pid();
    r->probe = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (r->probe < 0) r->probe_error = errno;
  }
  return *r;
}

}  // namespace

int route_source(const sockaddr_in& target, sockaddr_in* source) {
  Routes& r = routes();
  if (r.watched) {
    auto found = r.source_of.find(target.sin_addr.s_addr);
    if (found != r.source_of.end()) {
      *source = sockaddr_in{};
      source->sin_family = AF_INET;
      source->sin_addr.s_addr = found->second;
      return 0;
    }
  }
  if (r.probe < 0) return r.probe_error;  // errno has moved on since
  sockaddr none{};
  none.sa_family = AF_UNSPEC;
  connect(r.probe, &none, sizeof none);
  if (connect(r.probe, reinterpret_cast<const sockaddr*>(&target), sizeof target) != 0)
    return errno;
  socklen_t len = sizeof *source;
  getsockname(r.probe, reinterpret_cast<sockaddr*>(source), &len);
  source->sin_port = 0;
  if (r.watched) {
    // Bounded: a process that resolves ever new addresses between route changes starts
    // the cache again rather than grow it without end.
    if (r.source_of.size() >= kMostRemembered) r.source_of.clear();
    r.source_of[target.sin_addr.s_addr] = source->sin_addr.s_addr;
  }
  return 0;
}

int watch_route_changes() {
  Routes& r = routes();
  if (r.changes < 0) {
    r.changes = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
    sockaddr_nl groups{};
    groups.nl_family = AF_NETLINK;
    groups.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE;
    if (r.changes >= 0 &&
        bind(r.changes, reinterpret_cast<const sockaddr*>(&groups), sizeof groups) != 0) {
      close(r.changes);
      r.changes = -1;
    }
  }
  r.watched = r.changes >= 0;
  return r.changes;
}

size_t remembered_sources() {
  return routes().source_of.size();
}

void routes_changed() {
  Routes& r = routes();
  r.source_of.clear();
  char buf[8192];
  // ENOBUFS (notifications lost to an overrun) changes nothing: everything is forgotten.
  // What is left after these rounds keeps the descriptor readable for the next wake-up.
  for (int round = 0; round < 64 && r.changes >= 0; ++round) {
    if (recv(r.changes, buf, sizeof buf, MSG_DONTWAIT) <= 0 && errno != ENOBUFS) break;
  }
}

}  // namespace softrdma::cm

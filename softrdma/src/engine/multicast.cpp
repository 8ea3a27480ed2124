#include "engine/multicast.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "common/background_thread.hpp"
#include "common/log.hpp"
#include "common/softrdma_port.hpp"
#include "engine/registry.hpp"
#include "engine/responder.hpp"
#include "verbs/device_limits.hpp"
#include "wire/inbound_connection.hpp"

namespace softrdma {
namespace {

constexpr size_t kLargestDatagram = sizeof(wire::Request) + limits::kMtuBytes;

// The process's multicast receiver: one UDP socket on the softrdma port, the groups it has
// joined (counted by members), and a thread asleep in recv until a datagram comes.
struct Receiver {
  std::mutex mutex;
  int fd = -1;
  std::map<uint32_t, int> members;  // group (network order) -> members in this process
};

Receiver& receiver() {
  static auto* r = new Receiver();  // never destroyed: its thread lives as long as the process
  return *r;
}

// Joins or leaves `group_be` on every interface that has an address.
void set_membership(int fd, uint32_t group_be, int option) {
  const GidTable gids = GidTable::from_host();
  for (uint32_t i = 0; i < gids.populated(); ++i) {
    ip_mreqn m{};
    m.imr_multiaddr.s_addr = group_be;
    m.imr_ifindex = static_cast<int>(gids.interface_of(i));
    if (setsockopt(fd, IPPROTO_IP, option, &m, sizeof m) != 0 && errno != EADDRINUSE &&
        errno != EADDRNOTAVAIL)
      SOFTRDMA_DEBUG_LOG("multicast membership: %s", std::strerror(errno));
  }
}

// A datagram from a process of this registry on this host was delivered by its sender.
bool delivered_by_sender(const wire::Request& h, const GidTable& local) {
  Gid source;
  std::memcpy(source.data(), h.src_gid, 16);
  return Registry::instance().owns_qpn(h.src_qpn) && local.contains(source);
}

void deliver_to_own_members(const wire::Request& h, const char* payload) {
  iovec data{const_cast<char*>(payload), h.payload_len};
  const InboundRequest r = wire::to_inbound(h, &data, h.payload_len ? 1 : 0);
  const pid_t me = self_process().pid;
  Registry::instance().for_each_mcast_member(h.dst_gid, [&](uint32_t qpn, pid_t pid) {
    TargetQp t;
    if (pid == me && resolve_local_qp(qpn, t)) respond(t, r);
  });
}

void receive_loop(int fd) {
  std::vector<char> buf(kLargestDatagram + 1);
  GidTable local = GidTable::from_host();
  for (;;) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      SOFTRDMA_DEBUG_LOG("multicast receive: %s", std::strerror(errno));
      return;
    }
    wire::Request h;
    if (static_cast<size_t>(n) < sizeof h) continue;  // not ours: dropped, as a NIC would
    std::memcpy(&h, buf.data(), sizeof h);
    if (!wire::valid(h) || h.qp_type != IBV_QPT_UD ||
        static_cast<size_t>(n) != sizeof h + h.payload_len || h.length > limits::kMtuBytes)
      continue;
    Gid group;
    std::memcpy(group.data(), h.dst_gid, 16);
    if (!is_multicast(group) || delivered_by_sender(h, local)) continue;
    deliver_to_own_members(h, buf.data() + sizeof h);
  }
}

// The receiver's socket, made (and its thread started) with the first member.
int receiver_socket(Receiver& r) {
  if (r.fd >= 0) return r.fd;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  // Only the groups this socket joined, not every group some socket of the host joined.
  setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof zero);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(base_port());
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    SOFTRDMA_DEBUG_LOG("multicast: cannot bind port %u: %s", base_port(), std::strerror(errno));
    close(fd);
    return -1;
  }
  r.fd = fd;
  start_background_thread("softrdma-mcast", [fd] { receive_loop(fd); });
  return fd;
}

}  // namespace

bool is_multicast(const Gid& gid) {
  if (gid[0] == 0xff) return true;
  return GidTable::is_ipv4_mapped(gid) && (gid[12] & 0xf0) == 0xe0;
}

void multicast_join(const Gid& group) {
  if (!GidTable::is_ipv4_mapped(group)) return;  // IPv6 groups reach this host's members only
  Receiver& r = receiver();
  std::lock_guard lock(r.mutex);
  const uint32_t addr = GidTable::ipv4_of(group);
  const int fd = receiver_socket(r);
  if (fd >= 0 && r.members[addr]++ == 0) set_membership(fd, addr, IP_ADD_MEMBERSHIP);
}

void multicast_leave(const Gid& group) {
  if (!GidTable::is_ipv4_mapped(group)) return;
  Receiver& r = receiver();
  std::lock_guard lock(r.mutex);
  const uint32_t addr = GidTable::ipv4_of(group);
  auto it = r.members.find(addr);
  if (r.fd < 0 || it == r.members.end()) return;
  if (--it->second == 0) {
    set_membership(r.fd, addr, IP_DROP_MEMBERSHIP);
    r.members.erase(it);
  }
}

void multicast_transmit(const Gid& source, const wire::Request& header, const iovec* payload,
                        int count) {
  Gid group;
  std::memcpy(group.data(), header.dst_gid, 16);
  if (!GidTable::is_ipv4_mapped(group) || !GidTable::is_ipv4_mapped(source)) return;
  // One sending socket per thread: sendmsg needs no lock, and the interface is per call.
  thread_local const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  in_addr from{GidTable::ipv4_of(source)};
  setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &from, sizeof from);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(base_port());
  to.sin_addr.s_addr = GidTable::ipv4_of(group);
  iovec iov[limits::kMaxSge + 1];
  iov[0] = iovec{const_cast<wire::Request*>(&header), sizeof header};
  int n = 1;
  for (int i = 0; i < count && n <= limits::kMaxSge; ++i) iov[n++] = payload[i];
  msghdr m{};
  m.msg_name = &to;
  m.msg_namelen = sizeof to;
  m.msg_iov = iov;
  m.msg_iovlen = static_cast<size_t>(n);
  // Unreliable as UD itself: a datagram the network drops is lost, as on a NIC.
  if (sendmsg(fd, &m, MSG_DONTWAIT) < 0)
    SOFTRDMA_DEBUG_LOG("multicast send: %s", std::strerror(errno));
}

}  // namespace softrdma

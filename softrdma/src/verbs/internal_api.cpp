// Calls between softrdma's own programs and libraries (node SOFTRDMA_PRIVATE_1, not part of
// rdma-core's ABI): librdmacm asks libibverbs to stop a QP when its connection ends,
// softrdma-view where the device counters are; tests that speak the wire format as another
// host would ask for this user's hello and counters.
#include <cstdint>
#include <cstring>
#include <string>

#include "common/export.hpp"
#include "engine/device_counters.hpp"
#include "engine/responder.hpp"
#include "wire/hello.hpp"

using namespace softrdma;

// Moves QP `qpn` of this process to ERROR (its posted receives flush). Safe to call from
// any thread at any time: if the application destroyed the QP meanwhile, nothing happens.
// Returns 0, or -1 when there is no such QP.
SOFTRDMA_EXPORT int softrdma_qp_error(uint32_t qpn) {
  TargetQp qp;
  if (!resolve_local_qp(qpn, qp) || !qp.arena->is_self()) return -1;
  // Held like a peer delivering into the QP: ibv_destroy_qp waits until we are done.
  const TargetHold hold(qp);
  if (hold.ok()) qp_enter_error(*qp.arena, qp.qp, 0);
  return 0;
}

// This user's hello (wire::Hello, 32 bytes into `out`) as a link (role 1) or a listener (role
// 2) on a connection from `own_ipv4_be` to `peer_ipv4_be`: what any process of the user may
// compute from its registry. Returns 0, or -1 for an unknown role.
SOFTRDMA_EXPORT int softrdma_hello(int role, uint32_t own_ipv4_be, uint32_t peer_ipv4_be,
                                   void* out) {
  if (role != static_cast<int>(wire::Role::kLink) &&
      role != static_cast<int>(wire::Role::kListener))
    return -1;
  const wire::Hello h = wire::hello_of(static_cast<wire::Role>(role), own_ipv4_be, peer_ipv4_be);
  std::memcpy(out, &h, sizeof h);
  return 0;
}

// The device's counter named `name` (engine/device_counters.hpp) into *value: 0, or -1 for
// a name it does not count.
SOFTRDMA_EXPORT int softrdma_counter(const char* name, uint64_t* value) {
  for (size_t i = 0; i < static_cast<size_t>(Counter::kCount); ++i) {
    const auto c = static_cast<Counter>(i);
    if (std::strcmp(counter_name(c), name) == 0) {
      *value = counted(c);
      return 0;
    }
  }
  return -1;
}

// Writes every device counter's file and puts their directory (engine/device_counters.hpp)
// into `out` (`size` bytes, with its terminating 0): softrdma-run's view shows it as the
// port's hw_counters. Returns 0, or -1 when the directory cannot be made or does not fit.
SOFTRDMA_EXPORT int softrdma_counters_dir(char* out, size_t size) {
  const std::string dir = write_counter_files();
  if (dir.empty() || dir.size() + 1 > size) return -1;
  std::memcpy(out, dir.c_str(), dir.size() + 1);
  return 0;
}

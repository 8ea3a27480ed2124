// Calls between softrdma's two libraries (node SOFTRDMA_PRIVATE_1, not part of rdma-core's
// ABI): librdmacm asks libibverbs to stop a QP when its connection ends.
#include <cstdint>

#include "common/export.hpp"
#include "engine/responder.hpp"

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

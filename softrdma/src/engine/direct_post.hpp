// The same-host fast path of ibv_post_send: the common request of an RC QP whose peer is on
// this host (RDMA WRITE, READ, fetch-and-add, compare-and-swap, or a SEND into the peer's
// own receive queue; one SGE), carried out in place as plain memory accesses, with no
// work-request record and no lock shared with other processes beyond the receive queue's
// and the completion queue's.
#pragma once

#include <infiniband/verbs.h>

#include "verbs/objects.hpp"

namespace softrdma {

/// Carries out `wr` now if it is the common case and everything about it is in order; the
/// caller holds qp.sq_mutex. False, having changed nothing, for anything else (the peer not
/// resolved yet, work blocked before it, a memory window, several SGEs, any error to
/// report): the general path then takes it and decides, with the semantics it always had.
bool post_direct(Qp& qp, const ibv_send_wr& wr);

}  // namespace softrdma

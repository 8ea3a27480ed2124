// Synchronous ids (created without an event channel): calls block until their event.
#pragma once

#include <rdma/rdma_cma.h>

#include "cm/cm_objects.hpp"

namespace softrdma::cm {

/// Waits for the next event of a synchronous `id`: 0 if it is `want`, else -1 with an errno
/// that says what happened instead (ECONNREFUSED, ETIMEDOUT, ...).
int expect_event(CmId* id, rdma_cm_event_type want, int timeout_ms);

/// Makes `e` the id's current event (id->event), acknowledging the one it replaces.
void keep_event(CmId* id, Event* e);

/// rdma_create_id (used by rdma_create_ep).
int create_id(rdma_event_channel* channel, rdma_cm_id** out, void* context, rdma_port_space ps);

}  // namespace softrdma::cm

// Memory windows (IBTA 10.6.7): a key of its own that grants remote access to part of a
// region, bound and invalidated through a QP's send queue. A window lives in an MR slot of
// the registry (KeyKind::kWindowType1/2) and names the region it is bound into; a remote
// access through it is checked against the window and then served from the region.
#pragma once

#include <infiniband/verbs.h>
#include <cstdint>

#include "common/process_identity.hpp"

namespace softrdma {

/// A bind, as ibv_bind_mw (type 1) or an IBV_WR_BIND_MW work request (type 2) asks it.
struct WindowBind {
  uint32_t window_key = 0;  // the window's key now
  uint32_t new_key = 0;     // the key it has once bound (its low byte changes)
  uint32_t region_key = 0;  // the region to bind into; 0 with length 0: unbind (type 1)
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t access = 0;  // remote rights the window grants
};

/// Binds a window of this process, from QP `qpn` of PD `pd_id`. IBV_WC_SUCCESS, or
/// IBV_WC_MW_BIND_ERR when the window, the region, the range or the rights do not allow it.
ibv_wc_status bind_window(const WindowBind& bind, uint32_t pd_id, uint32_t qpn);

/// Invalidates the type 2 window `key` of `owner`, bound through QP `qpn` of PD `pd_id`
/// (IBV_WR_LOCAL_INV on that QP, or a SEND_WITH_INV arriving at it). False if not allowed.
bool invalidate_window(uint32_t key, const ProcessId& owner, uint32_t pd_id, uint32_t qpn);

/// ibv_dealloc_mw: unbinds window `key` and frees its slot.
void release_window(uint32_t key);

/// Windows are bound into region `key` (which then cannot be deregistered: EBUSY).
bool region_has_windows(uint32_t key);

}  // namespace softrdma

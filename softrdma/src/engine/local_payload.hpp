// The local side of a work request, gathered for sending: its inline bytes, or the
// registered memory its SGEs name, checked against the QP's PD.
#pragma once

#include <sys/uio.h>

#include "engine/memory_access.hpp"
#include "verbs/objects.hpp"

namespace softrdma {

struct LocalPayload {
  PinnedRanges pinned{PinnedRanges::Pin::kOwnMemory};
  iovec inline_iov[kMaxSge];
  const iovec* iov = inline_iov;
  int count = 0;
};

/// Gathers `w`'s local buffers into `out`: the bytes a SEND or WRITE carries, or where a READ
/// or atomic's result lands. False if its registered memory is not the QP's to use (the
/// request then fails with IBV_WC_LOC_PROT_ERR).
bool gather_local_payload(Qp& qp, const SendWork& w, LocalPayload& out);

/// `w`'s payload may be sent from where it is, registered memory the application leaves
/// alone until the request completes (not inline bytes, which it may reuse at once).
inline bool payload_may_be_borrowed(const SendWork& w) {
  return w.inline_data.empty() && !(w.send_flags & IBV_SEND_INLINE);
}

/// Keeps `w`'s inline bytes in `w` (SendWork::inline_data), read from the application's
/// buffers, which it may reuse once the post returns: call it while the post is under way,
/// for a request that may be sent (again) later.
void capture_inline(SendWork& w);

}  // namespace softrdma

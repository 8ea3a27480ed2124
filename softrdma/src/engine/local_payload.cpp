#include "engine/local_payload.hpp"

#include "engine/qp_types.hpp"
#include "engine/send_completion.hpp"

namespace softrdma {

bool gather_local_payload(Qp& qp, const SendWork& w, LocalPayload& out) {
  out.iov = out.inline_iov;
  out.count = 0;
  if (!w.inline_data.empty()) {
    out.inline_iov[out.count++] =
        iovec{const_cast<char*>(w.inline_data.data()), w.inline_data.size()};
    return true;
  }
  if (w.send_flags & IBV_SEND_INLINE) {
    // Only while the post is under way: the application's buffers still hold the bytes.
    for (int i = 0; i < w.sges.count; ++i)
      if (w.sges.at[i].length)
        out.inline_iov[out.count++] =
            iovec{reinterpret_cast<void*>(w.sges.at[i].addr), w.sges.at[i].length};
    return true;
  }
  const uint32_t need =
      (w.opcode == IBV_WR_RDMA_READ || is_atomic(w.opcode)) ? IBV_ACCESS_LOCAL_WRITE : 0;
  if (w.sges.count == 1 && w.sges.at[0].length) {
    const ibv_sge& sge = w.sges.at[0];
    if (char* here = qp.local_keys.reach(sge.lkey, sge.addr, sge.length, need, qp.pd_id)) {
      out.inline_iov[out.count++] = iovec{here, sge.length};
      return true;
    }
  }
  if (!pin_sge_list(out.pinned, w.sges.at, w.sges.count, self_process(), qp.pd_id, need))
    return false;
  out.iov = out.pinned.iov();
  out.count = out.pinned.count();
  return true;
}

void capture_inline(SendWork& w) {
  if (!(w.send_flags & IBV_SEND_INLINE) || !w.inline_data.empty()) return;
  w.inline_data.assign(w.sges.at, w.sges.count);
}

}  // namespace softrdma

// The extended send API (ibv_wr_start, ibv_wr_<opcode>, ibv_wr_set_*, ibv_wr_complete):
// work requests built field by field into the QP's WrBatch and posted together, or, if any
// of them is wrong or the send queue lacks room for all, not at all.
#include <cerrno>
#include <cstring>
#include <utility>

#include "engine/qp_types.hpp"
#include "engine/requester.hpp"
#include "verbs/device_limits.hpp"
#include "verbs/objects.hpp"
#include "verbs/ops.hpp"
#include "wire/application_looks.hpp"

namespace softrdma {
namespace {

WrBatch& batch_of(ibv_qp_ex* qpx) {
  return *reinterpret_cast<Qp*>(qpx)->wr_batch;
}

void fail(WrBatch& b, int err) {
  if (!b.error) b.error = err;
}

// Starts the next work request with the wr_id and flags the application set on the QP.
ibv_send_wr* begin(ibv_qp_ex* qpx, ibv_wr_opcode opcode) {
  WrBatch& b = batch_of(qpx);
  if (!b.started) {
    fail(b, EINVAL);  // an opcode outside ibv_wr_start ... ibv_wr_complete
    return nullptr;
  }
  ibv_send_wr& wr = b.entries.emplace_back().wr;
  wr.wr_id = qpx->wr_id;
  wr.send_flags = qpx->wr_flags;
  wr.opcode = opcode;
  return &wr;
}

// The work request the ibv_wr_set_* calls complete: the last one started.
WrBatch::Entry* current(ibv_qp_ex* qpx) {
  WrBatch& b = batch_of(qpx);
  if (!b.started || b.entries.empty()) {
    fail(b, EINVAL);
    return nullptr;
  }
  return &b.entries.back();
}

void wr_send(ibv_qp_ex* qpx) {
  begin(qpx, IBV_WR_SEND);
}

void wr_send_imm(ibv_qp_ex* qpx, __be32 imm) {
  if (ibv_send_wr* wr = begin(qpx, IBV_WR_SEND_WITH_IMM)) wr->imm_data = imm;
}

void set_rdma(ibv_send_wr* wr, uint32_t rkey, uint64_t remote_addr) {
  if (!wr) return;
  wr->wr.rdma.rkey = rkey;
  wr->wr.rdma.remote_addr = remote_addr;
}

void wr_rdma_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
  set_rdma(begin(qpx, IBV_WR_RDMA_WRITE), rkey, remote_addr);
}

void wr_rdma_write_imm(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, __be32 imm) {
  ibv_send_wr* wr = begin(qpx, IBV_WR_RDMA_WRITE_WITH_IMM);
  set_rdma(wr, rkey, remote_addr);
  if (wr) wr->imm_data = imm;
}

void wr_rdma_read(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
  set_rdma(begin(qpx, IBV_WR_RDMA_READ), rkey, remote_addr);
}

void set_atomic(ibv_send_wr* wr, uint32_t rkey, uint64_t remote_addr, uint64_t compare_add,
                uint64_t swap) {
  if (!wr) return;
  wr->wr.atomic.rkey = rkey;
  wr->wr.atomic.remote_addr = remote_addr;
  wr->wr.atomic.compare_add = compare_add;
  wr->wr.atomic.swap = swap;
}

void wr_atomic_cmp_swp(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, uint64_t compare,
                       uint64_t swap) {
  set_atomic(begin(qpx, IBV_WR_ATOMIC_CMP_AND_SWP), rkey, remote_addr, compare, swap);
}

void wr_atomic_fetch_add(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, uint64_t add) {
  set_atomic(begin(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD), rkey, remote_addr, add, 0);
}

// The 8 bytes are taken now, as a NIC copies them into the work queue entry.
void wr_atomic_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, const void* value) {
  ibv_send_wr* wr = begin(qpx, IBV_WR_ATOMIC_WRITE);
  if (!wr) return;
  set_rdma(wr, rkey, remote_addr);
  WrBatch::Entry& e = batch_of(qpx).entries.back();
  const auto* bytes = static_cast<const char*>(value);
  e.inline_bytes.assign(bytes, bytes + sizeof(uint64_t));
  e.wr.send_flags |= IBV_SEND_INLINE;
}

// Only a type 2 window is bound by a work request (as through ibv_post_send).
void wr_bind_mw(ibv_qp_ex* qpx, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* bind_info) {
  if (!mw || mw->type != IBV_MW_TYPE_2 || !bind_info) {
    fail(batch_of(qpx), EINVAL);
    return;
  }
  if (ibv_send_wr* wr = begin(qpx, IBV_WR_BIND_MW)) {
    wr->bind_mw.mw = mw;
    wr->bind_mw.rkey = rkey;
    wr->bind_mw.bind_info = *bind_info;
  }
}

void wr_local_inv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
  if (ibv_send_wr* wr = begin(qpx, IBV_WR_LOCAL_INV)) wr->invalidate_rkey = invalidate_rkey;
}

void wr_send_inv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
  if (ibv_send_wr* wr = begin(qpx, IBV_WR_SEND_WITH_INV)) wr->invalidate_rkey = invalidate_rkey;
}

void wr_set_ud_addr(ibv_qp_ex* qpx, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  WrBatch::Entry* e = current(qpx);
  if (!e) return;
  e->wr.wr.ud.ah = ah;
  e->wr.wr.ud.remote_qpn = remote_qpn;
  e->wr.wr.ud.remote_qkey = remote_qkey;
}

void wr_set_xrc_srqn(ibv_qp_ex* qpx, uint32_t remote_srqn) {
  if (WrBatch::Entry* e = current(qpx)) e->wr.qp_type.xrc.remote_srqn = remote_srqn;
}

void wr_set_sge_list(ibv_qp_ex* qpx, size_t num_sge, const ibv_sge* sg_list) {
  WrBatch::Entry* e = current(qpx);
  if (!e) return;
  e->sges.assign(sg_list, sg_list + num_sge);
  e->inline_bytes.clear();
  e->wr.send_flags &= ~IBV_SEND_INLINE;
}

void wr_set_sge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
  const ibv_sge sge{addr, length, lkey};
  wr_set_sge_list(qpx, 1, &sge);
}

// Inline data is copied now, as a NIC copies it into the work queue entry: the application
// may reuse its buffers as soon as the call returns.
void wr_set_inline_data_list(ibv_qp_ex* qpx, size_t num_buf, const ibv_data_buf* buf_list) {
  WrBatch::Entry* e = current(qpx);
  if (!e) return;
  size_t total = 0;
  for (size_t i = 0; i < num_buf; ++i) total += buf_list[i].length;
  if (total > limits::kMaxInline) {
    fail(batch_of(qpx), EINVAL);
    return;
  }
  e->inline_bytes.resize(total);
  size_t at = 0;
  for (size_t i = 0; i < num_buf; ++i) {
    if (buf_list[i].length)
      std::memcpy(e->inline_bytes.data() + at, buf_list[i].addr, buf_list[i].length);
    at += buf_list[i].length;
  }
  e->sges.clear();
  e->wr.send_flags |= IBV_SEND_INLINE;
}

void wr_set_inline_data(ibv_qp_ex* qpx, void* addr, size_t length) {
  const ibv_data_buf buf{addr, length};
  wr_set_inline_data_list(qpx, 1, &buf);
}

void wr_start(ibv_qp_ex* qpx) {
  WrBatch& b = batch_of(qpx);
  b.entries.clear();
  b.error = 0;
  b.started = true;
}

void wr_abort(ibv_qp_ex* qpx) {
  WrBatch& b = batch_of(qpx);
  b.entries.clear();
  b.error = 0;
  b.started = false;
}

// Points each work request at its scatter list (or its inline copy) and chains them.
void link_batch(WrBatch& b, ibv_sge* inline_sges) {
  for (size_t i = 0; i < b.entries.size(); ++i) {
    WrBatch::Entry& e = b.entries[i];
    if (e.wr.send_flags & IBV_SEND_INLINE) {
      inline_sges[i] = ibv_sge{reinterpret_cast<uintptr_t>(e.inline_bytes.data()),
                               static_cast<uint32_t>(e.inline_bytes.size()), 0};
      e.wr.sg_list = &inline_sges[i];
      e.wr.num_sge = e.inline_bytes.empty() ? 0 : 1;
    } else {
      e.wr.sg_list = e.sges.data();
      e.wr.num_sge = static_cast<int>(e.sges.size());
    }
    e.wr.next = i + 1 < b.entries.size() ? &b.entries[i + 1].wr : nullptr;
  }
}

int wr_complete(ibv_qp_ex* qpx) {
  Qp& q = *reinterpret_cast<Qp*>(qpx);
  WrBatch& b = *q.wr_batch;
  int err = b.started ? b.error : EINVAL;
  b.started = false;
  if (!err && !b.entries.empty()) {
    std::vector<ibv_sge> inline_sges(b.entries.size());
    link_batch(b, inline_sges.data());
    BiasedLock::Guard lock(q.sq_mutex);
    for (const WrBatch::Entry& e : b.entries)
      if ((err = requester_check(q, e.wr))) break;
    if (!err && !requester_has_room(q, b.entries.size())) err = ENOMEM;
    for (size_t i = 0; !err && i < b.entries.size(); ++i) err = requester_post(q, b.entries[i].wr);
  }
  b.entries.clear();
  wire::look_after_post();
  return err;
}

}  // namespace

uint64_t supported_send_ops(ibv_qp_type type) {
  const std::pair<ibv_wr_opcode, uint64_t> ops[] = {
      {IBV_WR_SEND, IBV_QP_EX_WITH_SEND},
      {IBV_WR_SEND_WITH_IMM, IBV_QP_EX_WITH_SEND_WITH_IMM},
      {IBV_WR_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE},
      {IBV_WR_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM},
      {IBV_WR_RDMA_READ, IBV_QP_EX_WITH_RDMA_READ},
      {IBV_WR_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP},
      {IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD},
      {IBV_WR_ATOMIC_WRITE, IBV_QP_EX_WITH_ATOMIC_WRITE},
      {IBV_WR_BIND_MW, IBV_QP_EX_WITH_BIND_MW},
      {IBV_WR_LOCAL_INV, IBV_QP_EX_WITH_LOCAL_INV},
      {IBV_WR_SEND_WITH_INV, IBV_QP_EX_WITH_SEND_WITH_INV}};
  uint64_t supported = 0;
  for (const auto& [opcode, flag] : ops)
    if (opcode_allowed(type, opcode)) supported |= flag;
  return supported;
}

void install_qp_ex_send_ops(Qp& q) {
  ibv_qp_ex& x = q.qpx;
  x.wr_start = wr_start;
  x.wr_complete = wr_complete;
  x.wr_abort = wr_abort;
  x.wr_send = wr_send;
  x.wr_send_imm = wr_send_imm;
  x.wr_set_ud_addr = wr_set_ud_addr;
  x.wr_set_sge = wr_set_sge;
  x.wr_set_sge_list = wr_set_sge_list;
  x.wr_set_inline_data = wr_set_inline_data;
  x.wr_set_inline_data_list = wr_set_inline_data_list;
  const ibv_qp_type type = q.qpx.qp_base.qp_type;
  if (type == IBV_QPT_XRC_SEND) x.wr_set_xrc_srqn = wr_set_xrc_srqn;
  if (opcode_allowed(type, IBV_WR_RDMA_WRITE)) {
    x.wr_rdma_write = wr_rdma_write;
    x.wr_rdma_write_imm = wr_rdma_write_imm;
  }
  if (opcode_allowed(type, IBV_WR_RDMA_READ)) {
    x.wr_rdma_read = wr_rdma_read;
    x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
    x.wr_atomic_fetch_add = wr_atomic_fetch_add;
  }
  if (opcode_allowed(type, IBV_WR_BIND_MW)) {
    x.wr_bind_mw = wr_bind_mw;
    x.wr_local_inv = wr_local_inv;
  }
  if (opcode_allowed(type, IBV_WR_SEND_WITH_INV)) x.wr_send_inv = wr_send_inv;
  if (opcode_allowed(type, IBV_WR_ATOMIC_WRITE)) x.wr_atomic_write = wr_atomic_write;
  q.wr_batch = std::make_unique<WrBatch>();
}

}  // namespace softrdma

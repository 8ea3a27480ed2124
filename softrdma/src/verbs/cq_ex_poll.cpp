// The extended CQ's polling (ibv_start_poll, ibv_next_poll, ibv_end_poll, ibv_wc_read_*):
// one completion at a time taken from the same ring as ibv_poll_cq, its fields read back
// through the accessors for the ibv_wc_flags the CQ was created with.
#include <cerrno>

#include "verbs/objects.hpp"
#include "verbs/ops.hpp"

namespace softrdma {
namespace {

Cq& cq_of(ibv_cq_ex* cq_ex) {
  return *reinterpret_cast<Cq*>(cq_ex);
}

const ibv_wc& polled(ibv_cq_ex* cq_ex) {
  return cq_of(cq_ex).polled;
}

// Takes the next completion: 0 and status/wr_id set, or ENOENT when the CQ is empty.
int take_next(ibv_cq_ex* cq_ex) {
  Cq& c = cq_of(cq_ex);
  if (poll_cq(&c.cq, 1, &c.polled) != 1) return ENOENT;
  cq_ex->status = c.polled.status;
  cq_ex->wr_id = c.polled.wr_id;
  return 0;
}

int start_poll(ibv_cq_ex* cq_ex, ibv_poll_cq_attr* attr) {
  if (attr && attr->comp_mask) return EINVAL;  // no poll attributes are defined
  return take_next(cq_ex);
}

int next_poll(ibv_cq_ex* cq_ex) {
  return take_next(cq_ex);
}

void end_poll(ibv_cq_ex*) {}  // completions are consumed as they are taken

// ibv_wc_read_<field>: the field of the completion taken last, as the accessor returns it.
template <typename Result, auto Field>
Result read(ibv_cq_ex* c) {
  return static_cast<Result>(polled(c).*Field);
}

}  // namespace

void install_cq_ex_ops(Cq& c) {
  ibv_cq_ex& x = c.cq_ex;
  x.start_poll = start_poll;
  x.next_poll = next_poll;
  x.end_poll = end_poll;
  // The accessors of IBV_WC_STANDARD_FLAGS (kSupportedWcFlags); opcode and vendor error are
  // always readable.
  static_assert(kSupportedWcFlags == IBV_WC_STANDARD_FLAGS);
  x.read_opcode = read<ibv_wc_opcode, &ibv_wc::opcode>;
  x.read_vendor_err = read<uint32_t, &ibv_wc::vendor_err>;
  x.read_byte_len = read<uint32_t, &ibv_wc::byte_len>;
  x.read_imm_data = read<__be32, &ibv_wc::imm_data>;
  x.read_qp_num = read<uint32_t, &ibv_wc::qp_num>;
  x.read_src_qp = read<uint32_t, &ibv_wc::src_qp>;
  x.read_wc_flags = read<unsigned int, &ibv_wc::wc_flags>;
  x.read_slid = read<uint32_t, &ibv_wc::slid>;
  x.read_sl = read<uint8_t, &ibv_wc::sl>;
  x.read_dlid_path_bits = read<uint8_t, &ibv_wc::dlid_path_bits>;
}

}  // namespace softrdma

#include "engine/memory_access.hpp"

#include <limits.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/mapping_check.hpp"
#include "engine/iovec_list.hpp"
#include "engine/ordered_copy.hpp"
#include "engine/shared_pages.hpp"

namespace softrdma {

bool admits(const MrSlot& s, uint64_t addr, uint64_t length, const ProcessId& owner, uint32_t pd_id,
            uint32_t access) {
  if (s.pid != owner.pid || s.start_time != owner.start_time || s.pd_id != pd_id) return false;
  if ((s.access & access) != access) return false;
  return addr >= s.iova && length <= s.length && addr - s.iova <= s.length - length;
}

bool pin_published(const MrSlot& s, EntryPins& pins, uint32_t key) {
  pins.pin();
  // Re-checked after pinning: retiring a key clears it, then waits for the pins to drain.
  if (s.key.load(std::memory_order_seq_cst) == key) return true;
  pins.unpin();
  return false;
}

char* map_region(const MrSlot& s, const ProcessId& owner, uint64_t addr, uint64_t length) {
  const uint64_t offset = addr - s.iova;
  if (owner == self_process()) {
    // An on-demand region may have holes: an access to one fails, as a page fault the
    // device cannot resolve does. (Peers reach it with process_vm_*, which says EFAULT.)
    char* here = reinterpret_cast<char*>(s.host_addr + offset);
    if ((s.access & IBV_ACCESS_ON_DEMAND) &&
        !range_is_mapped(reinterpret_cast<uintptr_t>(here), length))
      return nullptr;
    return here;
  }
  if (s.memfd < 0) return nullptr;
  char* base = map_peer_pages(owner, s.memfd, s.memfd_serial, s.memfd_offset + s.length);
  return base ? base + s.memfd_offset + offset : nullptr;
}

namespace {

// Pins `key` (a live key of `owner`) against its retirement; nullptr if it is not live.
MrSlot* pin_key(uint32_t key, bool pin) {
  Registry& registry = Registry::instance();
  MrSlot* s = registry.mr_slot(key);
  if (!s || s->key.load(std::memory_order_acquire) != key) return nullptr;
  if (!pin) return s;
  return pin_published(*s, registry.mr_pins(*s), key) ? s : nullptr;
}

void unpin_slot(const MrSlot& s) {
  Registry::instance().mr_pins(s).unpin();
}

}  // namespace

bool PinnedRanges::add(uint32_t key, uint64_t addr, uint64_t length, const ProcessId& owner,
                       uint32_t pd_id, uint32_t access, uint32_t remote_qpn) {
  if (count_ >= kMaxSge) return false;
  MrSlot* s = pin_key(key, pin_);
  if (!s) return false;
  if (s->kind != KeyKind::kRegion) {
    // A window: only for remote access (a type 2 one only through the QP it is bound to);
    // checked while pinned, then the access is served from the region it is bound into.
    const uint32_t region_key = s->parent_key;
    const bool allowed = pin_ && remote_qpn != 0 && region_key != 0 &&
                         admits(*s, addr, length, owner, pd_id, access) &&
                         (s->kind != KeyKind::kWindowType2 || s->bound_qpn == remote_qpn);
    if (pin_) unpin_slot(*s);
    if (!allowed) return false;
    key = region_key;
    if (!(s = pin_key(key, pin_))) return false;
    access = 0;  // the window's rights were checked; the region's do not apply
  }
  if (s->kind != KeyKind::kRegion || !admits(*s, addr, length, owner, pd_id, access)) {
    if (pin_) unpin_slot(*s);
    return false;
  }
  pins_[count_] = &Registry::instance().mr_pins(*s);
  iov_[count_] = iovec{reinterpret_cast<void*>(s->host_addr + (addr - s->iova)), length};
  char* here = map_region(*s, owner, addr, length);
  if (!here && owner == self_process()) {  // a hole in an on-demand region of our own
    if (pin_) unpin_slot(*s);
    return false;
  }
  mapped_[count_] = iovec{here, length};
  if (!here) all_mapped_ = false;
  if (s->memfd < 0) on_shared_pages_ = false;
  ++count_;
  total_ += length;
  return true;
}

void PinnedRanges::release() {
  if (pin_)
    for (int i = 0; i < count_; ++i) pins_[i]->unpin();
  count_ = 0;
  total_ = 0;
  all_mapped_ = true;
  on_shared_pages_ = true;
}

bool pin_sge_list(PinnedRanges& out, const ibv_sge* sge, int num_sge, const ProcessId& owner,
                  uint32_t pd_id, uint32_t access) {
  for (int i = 0; i < num_sge; ++i) {
    if (sge[i].length == 0) continue;
    if (!out.add(sge[i].lkey, sge[i].addr, sge[i].length, owner, pd_id, access)) return false;
  }
  return true;
}

namespace {

// Ranges of one process may overlap (a QP connected to itself, one region): moved.
void copy_local(const iovec* dst, int ndst, const iovec* src, int nsrc) {
  if (ndst == 1 && nsrc == 1) {  // the common case, without the walk's bookkeeping
    move_tail_last(dst->iov_base, src->iov_base, std::min(dst->iov_len, src->iov_len));
    return;
  }
  int di = 0, si = 0;
  size_t doff = 0, soff = 0;
  while (di < ndst && si < nsrc) {
    const size_t n = std::min(dst[di].iov_len - doff, src[si].iov_len - soff);
    move_tail_last(static_cast<char*>(dst[di].iov_base) + doff,
                   static_cast<const char*>(src[si].iov_base) + soff, n);
    doff += n;
    soff += n;
    if (doff == dst[di].iov_len) ++di, doff = 0;
    if (soff == src[si].iov_len) ++si, soff = 0;
  }
}

using VmCall = ssize_t (*)(pid_t, const iovec*, unsigned long, const iovec*, unsigned long,
                           unsigned long);

// process_vm_* may stop early; resume from where it stopped until everything moved.
int vm_copy(VmCall call, pid_t pid, const iovec* local, int nlocal, const iovec* remote,
            int nremote) {
  if (nlocal > kMaxSge + 2 || nremote > kMaxSge + 2) return EINVAL;
  size_t want = iov_bytes(local, nlocal);
  iovec l_list[kMaxSge + 2], r_list[kMaxSge + 2];  // a list of kMaxSge + 1, split by vm_write
  std::copy(local, local + nlocal, l_list);
  std::copy(remote, remote + nremote, r_list);
  iovec* l = l_list;
  iovec* r = r_list;
  while (want > 0) {
    ssize_t n =
        call(pid, l, static_cast<unsigned long>(nlocal), r, static_cast<unsigned long>(nremote), 0);
    if (n < 0) return errno;
    if (n == 0) return EFAULT;
    want -= static_cast<size_t>(n);
    drop_front(l, nlocal, static_cast<size_t>(n));
    drop_front(r, nremote, static_cast<size_t>(n));
  }
  return 0;
}

// Into another process: the target's last bytes are written last, as copy_local does.
int vm_write(pid_t pid, const iovec* local, int nlocal, const iovec* remote, int nremote) {
  if (nremote > kMaxSge + 1) return EINVAL;
  iovec split[kMaxSge + 2];
  return vm_copy(process_vm_writev, pid, local, nlocal, split,
                 split_ordered_tail(remote, nremote, split));
}

}  // namespace

int copy_into(const PinnedRanges& dst, const ProcessId& owner, const iovec* src, int count) {
  if (count == 0 || dst.count() == 0) return 0;
  if (dst.all_mapped()) {
    copy_local(dst.mapped(), dst.count(), src, count);
    return 0;
  }
  return vm_write(owner.pid, src, count, dst.iov(), dst.count());
}

int copy_into(const PinnedRanges& dst, const ProcessId& owner, const iovec* src, int count,
              PayloadTail* tail) {
  if (!tail || tail->remaining() == 0) return copy_into(dst, owner, src, count);
  if (!dst.all_mapped()) {
    // process_vm_writev takes its bytes from memory of this process.
    std::vector<char> rest(tail->remaining());
    iovec all[kMaxSge + 2];
    if (count > kMaxSge + 1) return EINVAL;
    std::copy(src, src + count, all);
    all[count] = {rest.data(), rest.size()};
    if (!tail->read(&all[count], 1)) return EFAULT;
    return vm_write(owner.pid, all, count + 1, dst.iov(), dst.count());
  }
  copy_local(dst.mapped(), dst.count(), src, count);
  // The ranges after the bytes `src` filled, as far as the tail reaches.
  size_t skip = iov_bytes(src, count);
  size_t want = tail->remaining();
  iovec rest[kMaxSge];
  int n = 0;
  for (int i = 0; i < dst.count() && want > 0; ++i) {
    const iovec& d = dst.mapped()[i];
    if (skip >= d.iov_len) {
      skip -= d.iov_len;
      continue;
    }
    const size_t len = std::min(d.iov_len - skip, want);
    rest[n++] = {static_cast<char*>(d.iov_base) + skip, len};
    want -= len;
    skip = 0;
  }
  iovec ordered[kMaxSge + 1];
  return tail->read(ordered, split_ordered_tail(rest, n, ordered)) ? 0 : EFAULT;
}

int copy_out_of(const PinnedRanges& src, const ProcessId& owner, const iovec* dst, int count) {
  if (count == 0 || src.count() == 0) return 0;
  if (src.all_mapped()) {
    copy_local(dst, count, src.mapped(), src.count());
    return 0;
  }
  return vm_copy(process_vm_readv, owner.pid, dst, count, src.iov(), src.count());
}

int copy_to_process(const ProcessId& target, const iovec* local, int nlocal, const iovec* remote,
                    int nremote) {
  if (nlocal == 0 || nremote == 0) return 0;
  if (target == self_process()) {
    copy_local(remote, nremote, local, nlocal);
    return 0;
  }
  return vm_write(target.pid, local, nlocal, remote, nremote);
}

int copy_from_process(const ProcessId& target, const iovec* local, int nlocal, const iovec* remote,
                      int nremote) {
  if (nlocal == 0 || nremote == 0) return 0;
  if (target == self_process()) {
    copy_local(local, nlocal, remote, nremote);
    return 0;
  }
  return vm_copy(process_vm_readv, target.pid, local, nlocal, remote, nremote);
}

}  // namespace softrdma

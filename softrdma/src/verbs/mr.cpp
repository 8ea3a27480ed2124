// Memory registration: ibv_reg_mr and its iova forms, ibv_rereg_mr, ibv_dereg_mr, and
// on-demand paging. An on-demand region pins and moves nothing: softrdma reaches it through
// the owner's address space as it is at each access (process_vm_*), so later mappings show
// through, as ODP promises; the implicit region (NULL, SIZE_MAX) covers the whole of it.
#include <sys/mman.h>
#include <unistd.h>
#include <cerrno>
#include <cstdint>

#include "common/export.hpp"
#include "common/mapping_check.hpp"
#include "engine/memory_access.hpp"
#include "engine/memory_windows.hpp"
#include "engine/registry.hpp"
#include "engine/shared_pages.hpp"
#include "verbs/device_limits.hpp"
#include "verbs/objects.hpp"
#include "verbs/ops.hpp"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using namespace softrdma;

namespace {

constexpr uint32_t kSupportedAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
    IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_HUGETLB | IBV_ACCESS_ON_DEMAND;

bool implicit_on_demand(const void* addr, size_t length, uint32_t access) {
  return (access & IBV_ACCESS_ON_DEMAND) && addr == nullptr && length == SIZE_MAX;
}

// Returns 0 or the errno that registration fails with.
int check_registration(const void* addr, size_t length, uint32_t access) {
  // Optional bits (relaxed ordering and up) are hints: ignored when not supported.
  access &= IBV_ACCESS_OPTIONAL_FIRST - 1;
  if (access & ~kSupportedAccess) return EINVAL;
  // Remote write and atomic access require local write (IBTA 10.6.3.1).
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE))
    return EINVAL;
  if (implicit_on_demand(addr, length, access)) return 0;
  if (length == 0 || length > limits::kMaxMrSize || !addr) return EINVAL;
  if (access & IBV_ACCESS_ON_DEMAND)  // pages need not be there yet
    return reinterpret_cast<uintptr_t>(addr) + length < reinterpret_cast<uintptr_t>(addr) ? EINVAL
                                                                                          : 0;
  // Like pinning on a NIC, registration fails for memory that is not mapped with the
  // rights the access asks for (writable when the device may write into it).
  const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t end = start + length;
  const bool device_writes =
      access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  if (end < start || !mapped_with_access(start, end, device_writes)) return EFAULT;
  return 0;
}

ibv_mr* register_region(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  const uint32_t acc = static_cast<uint32_t>(access) & (IBV_ACCESS_OPTIONAL_FIRST - 1);
  if (int err = check_registration(addr, length, acc)) {
    errno = err;
    return nullptr;
  }
  auto* mr = new (std::nothrow) Mr();
  if (!mr) {
    errno = ENOMEM;
    return nullptr;
  }
  const auto pages = (acc & IBV_ACCESS_ON_DEMAND) ? std::nullopt : share_pages(addr, length);
  if (implicit_on_demand(addr, length, acc)) iova = 0;
  const uint32_t key =
      Registry::instance().claim_mr(to_pd(pd)->id, acc, iova, length,
                                    reinterpret_cast<uint64_t>(addr), pages ? &*pages : nullptr);
  if (!key) {
    if (pages) unshare_pages(addr, length);
    delete mr;
    errno = ENOMEM;
    return nullptr;
  }
  mr->moved_pages = pages.has_value();
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  mr->mr.addr = addr;
  mr->mr.length = length;
  mr->mr.handle = key;
  mr->mr.lkey = mr->mr.rkey = key;
  mr->iova = iova;
  mr->access = acc;
  mr->owner_pd = to_pd(pd);
  to_pd(pd)->users.fetch_add(1);
  return &mr->mr;
}

}  // namespace

namespace softrdma {

// ibv_advise_mr on on-demand regions: a prefetch brings the pages in now (softrdma's own
// view of memory is the process's page tables, so there is nothing else to fill); a
// no-fault prefetch has nothing to do.
int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
              uint32_t num_sge) {
  if (advice > IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT || (flags & ~IBV_ADVISE_MR_FLAG_FLUSH) ||
      num_sge == 0 || !sg_list)
    return EINVAL;
  PinnedRanges ranges(PinnedRanges::Pin::kOwnMemory);
  for (uint32_t i = 0; i < num_sge; ++i) {
    const MrSlot* s = Registry::instance().mr_slot(sg_list[i].lkey);
    if (!s || !(s->access & IBV_ACCESS_ON_DEMAND) ||
        !ranges.add(sg_list[i].lkey, sg_list[i].addr, sg_list[i].length, self_process(),
                    to_pd(pd)->id, 0))
      return EINVAL;
  }
  if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) return 0;
  const int populate =
      advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  for (int i = 0; i < ranges.count(); ++i) {
    const auto start = reinterpret_cast<uintptr_t>(ranges.iov()[i].iov_base) & ~(page - 1);
    const auto end =
        reinterpret_cast<uintptr_t>(ranges.iov()[i].iov_base) + ranges.iov()[i].iov_len;
    // Advice only: a kernel without MADV_POPULATE_* (before 5.14) leaves the pages to fault.
    if (madvise(reinterpret_cast<void*>(start), end - start, populate) != 0 && errno != EINVAL)
      return errno;
  }
  return 0;
}

}  // namespace softrdma

SOFTRDMA_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return register_region(pd, addr, length, reinterpret_cast<uint64_t>(addr), access);
}

SOFTRDMA_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                        int access) {
  return register_region(pd, addr, length, iova, access);
}

SOFTRDMA_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                         unsigned int access) {
  return register_region(pd, addr, length, iova, static_cast<int>(access));
}

SOFTRDMA_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  Mr* m = to_mr(mr);
  if (region_has_windows(mr->lkey)) return EBUSY;  // unbind or deallocate them first
  // Returns only once no peer is inside the region any more.
  Registry::instance().release_mr(mr->lkey);
  if (m->moved_pages) unshare_pages(mr->addr, mr->length);
  m->owner_pd->users.fetch_sub(1);
  delete m;
  return 0;
}

SOFTRDMA_EXPORT int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length,
                                 int access) {
  constexpr int kKnown =
      IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
  if (flags == 0 || (flags & ~kKnown)) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  Mr* m = to_mr(mr);
  if (region_has_windows(mr->lkey)) {  // the windows name the region as it is
    errno = EBUSY;
    return IBV_REREG_MR_ERR_INPUT;
  }
  Pd* new_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? to_pd(pd) : m->owner_pd;
  void* new_addr = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? addr : mr->addr;
  size_t new_len = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? length : mr->length;
  uint32_t new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS)
                            ? static_cast<uint32_t>(access) & (IBV_ACCESS_OPTIONAL_FIRST - 1)
                            : m->access;
  if (!new_pd) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  if (int err = check_registration(new_addr, new_len, new_access)) {
    errno = err;
    return IBV_REREG_MR_ERR_INPUT;
  }
  Registry& reg = Registry::instance();
  // A new translation starts at its own address; otherwise the region keeps its iova.
  const uint64_t new_iova =
      (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? reinterpret_cast<uint64_t>(new_addr) : m->iova;
  const auto pages =
      (new_access & IBV_ACCESS_ON_DEMAND) ? std::nullopt : share_pages(new_addr, new_len);
  // The keys stay (as on mlx5 and rxe): a peer holding the rkey reaches the region as it is now.
  if (!reg.update_mr(mr->lkey, new_pd->id, new_access, new_iova, new_len,
                     reinterpret_cast<uint64_t>(new_addr), pages ? &*pages : nullptr)) {
    if (pages) unshare_pages(new_addr, new_len);
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  if (m->moved_pages) unshare_pages(mr->addr, mr->length);
  m->moved_pages = pages.has_value();
  if (new_pd != m->owner_pd) {
    m->owner_pd->users.fetch_sub(1);
    new_pd->users.fetch_add(1);
  }
  m->owner_pd = new_pd;
  m->iova = new_iova;
  m->access = new_access;
  mr->pd = &new_pd->pd;
  mr->addr = new_addr;
  mr->length = new_len;
  return 0;
}

SOFTRDMA_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int) {
  errno = EOPNOTSUPP;
  return nullptr;
}

SOFTRDMA_EXPORT ibv_mr* ibv_import_mr(ibv_pd*, uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}

SOFTRDMA_EXPORT void ibv_unimport_mr(ibv_mr*) {}

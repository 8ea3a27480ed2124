// Protection domains.
#include <atomic>
#include <cerrno>

#include "common/export.hpp"
#include "verbs/objects.hpp"

using namespace softrdma;

SOFTRDMA_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) {
  static std::atomic<uint32_t> next_id{1};
  auto* pd = new (std::nothrow) Pd();
  if (!pd) {
    errno = ENOMEM;
    return nullptr;
  }
  pd->pd.context = context;
  pd->pd.handle = pd->id = next_id.fetch_add(1);
  return &pd->pd;
}

SOFTRDMA_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  Pd* p = to_pd(pd);
  if (p->users.load() != 0) return EBUSY;
  if (p->protection) p->protection->users.fetch_sub(1);  // a parent domain
  if (p->td) p->td->users.fetch_sub(1);
  delete p;
  return 0;
}

SOFTRDMA_EXPORT ibv_pd* ibv_import_pd(ibv_context*, uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}

SOFTRDMA_EXPORT void ibv_unimport_pd(ibv_pd*) {}

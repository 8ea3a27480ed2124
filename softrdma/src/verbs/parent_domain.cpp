// Thread domains and parent domains (ibv_alloc_td, ibv_alloc_parent_domain). A parent
// domain stands for its protection domain wherever a PD is taken (QPs, SRQs, MRs, and
// ibv_create_cq_ex with IBV_CQ_INIT_ATTR_MASK_PD), and ibv_dealloc_pd frees it. Its custom
// allocators are accepted and never called: their resource types are provider-specific
// (mlx5dv's), and softrdma's queues must live in the arena that peer processes map, not in
// memory of the application's choosing; a provider may always use its own allocator.
#include <cerrno>

#include "verbs/objects.hpp"
#include "verbs/ops.hpp"

namespace softrdma {

ibv_td* alloc_td(ibv_context* context, ibv_td_init_attr* attr) {
  if (!attr || attr->comp_mask) {
    errno = EINVAL;
    return nullptr;
  }
  auto* td = new (std::nothrow) Td();
  if (!td) {
    errno = ENOMEM;
    return nullptr;
  }
  td->td.context = context;
  return &td->td;
}

int dealloc_td(ibv_td* td) {
  Td* t = to_td(td);
  if (t->users.load() != 0) return EBUSY;  // a parent domain still uses it
  delete t;
  return 0;
}

ibv_pd* alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr) {
  constexpr uint32_t kKnown =
      IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  if (!attr || !attr->pd || (attr->comp_mask & ~kKnown) || to_pd(attr->pd)->protection ||
      ((attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) &&
       (!attr->alloc || !attr->free))) {
    errno = EINVAL;
    return nullptr;
  }
  auto* parent = new (std::nothrow) Pd();
  if (!parent) {
    errno = ENOMEM;
    return nullptr;
  }
  Pd* pd = to_pd(attr->pd);
  parent->pd.context = context;
  parent->pd.handle = pd->pd.handle;
  parent->id = pd->id;  // protection is the wrapped PD's
  parent->protection = pd;
  parent->td = attr->td ? to_td(attr->td) : nullptr;
  pd->users.fetch_add(1);
  if (parent->td) parent->td->users.fetch_add(1);
  return &parent->pd;
}

}  // namespace softrdma

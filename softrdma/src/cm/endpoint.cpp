// rdma_getaddrinfo and the endpoint calls built on it: rdma_create_ep, rdma_destroy_ep,
// rdma_get_request (synchronous listeners).
#include <netdb.h>
#include <rdma/rdma_verbs.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cm/cm_context.hpp"
#include "cm/cm_objects.hpp"
#include "cm/sync_wait.hpp"
#include "common/export.hpp"

namespace softrdma::cm {
int create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* init);
}

using namespace softrdma::cm;

namespace {

sockaddr* copy_addr(const sockaddr* a, socklen_t len) {
  auto* out = static_cast<sockaddr*>(std::malloc(len));
  std::memcpy(out, a, len);
  return out;
}

}  // namespace

SOFTRDMA_EXPORT int rdma_getaddrinfo(const char* node, const char* service,
                                     const rdma_addrinfo* hints, rdma_addrinfo** res) {
  if (!res) return fail(EINVAL);
  // Without a name, librdmacm takes the addresses the hints carry.
  const bool from_hints = !node && !service;
  if (from_hints && !(hints && (hints->ai_src_addr || hints->ai_dst_addr))) return fail(EINVAL);
  const int flags = hints ? hints->ai_flags : 0;
  const bool passive = flags & RAI_PASSIVE;
  addrinfo* found = nullptr;
  if (!from_hints) {
    addrinfo want{};
    want.ai_family = AF_INET;
    want.ai_socktype = SOCK_STREAM;
    want.ai_flags = (passive ? AI_PASSIVE : 0) | ((flags & RAI_NUMERICHOST) ? AI_NUMERICHOST : 0);
    if (int rc = getaddrinfo(node, service, &want, &found)) {
      errno = rc == EAI_SYSTEM ? errno : ENOENT;
      return -1;
    }
  }
  auto* ai = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
  ai->ai_flags = flags;
  ai->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
  ai->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
  if (ai->ai_port_space == RDMA_PS_UDP && !(hints && hints->ai_qp_type))
    ai->ai_qp_type = IBV_QPT_UD;
  if (found) {
    // The name is the source of a passive side and the destination of an active one.
    socklen_t& len = passive ? ai->ai_src_len : ai->ai_dst_len;
    sockaddr*& addr = passive ? ai->ai_src_addr : ai->ai_dst_addr;
    len = found->ai_addrlen;
    addr = copy_addr(found->ai_addr, found->ai_addrlen);
    freeaddrinfo(found);
  }
  if (hints && hints->ai_src_addr && !ai->ai_src_addr) {
    ai->ai_src_len = hints->ai_src_len;
    ai->ai_src_addr = copy_addr(hints->ai_src_addr, hints->ai_src_len);
  }
  if (hints && hints->ai_dst_addr && !ai->ai_dst_addr && !passive) {
    ai->ai_dst_len = hints->ai_dst_len;
    ai->ai_dst_addr = copy_addr(hints->ai_dst_addr, hints->ai_dst_len);
  }
  const sockaddr* named = ai->ai_src_addr ? ai->ai_src_addr : ai->ai_dst_addr;
  if (!named) {  // a passive lookup whose hints carry only a destination
    rdma_freeaddrinfo(ai);
    return fail(EINVAL);
  }
  ai->ai_family = named->sa_family;
  *res = ai;
  return 0;
}

SOFTRDMA_EXPORT void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res) {
    rdma_addrinfo* next = res->ai_next;
    std::free(res->ai_src_addr);
    std::free(res->ai_dst_addr);
    std::free(res->ai_src_canonname);
    std::free(res->ai_dst_canonname);
    std::free(res->ai_route);
    std::free(res->ai_connect);
    std::free(res);
    res = next;
  }
}

SOFTRDMA_EXPORT int rdma_create_ep(rdma_cm_id** out, rdma_addrinfo* res, ibv_pd* pd,
                                   ibv_qp_init_attr* qp_init_attr) {
  if (!out || !res) return fail(EINVAL);
  rdma_cm_id* id = nullptr;
  if (create_id(nullptr, &id, nullptr, static_cast<rdma_port_space>(res->ai_port_space)) != 0)
    return -1;
  if (res->ai_qp_type) id->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
  int rc;
  if (res->ai_flags & RAI_PASSIVE) {
    rc = rdma_bind_addr(id, res->ai_src_addr);
    if (rc == 0 && qp_init_attr) {
      // Every connection this endpoint accepts gets a QP like this one.
      to_id(id)->has_child_qp_attr = true;
      to_id(id)->child_qp_attr = *qp_init_attr;
      to_id(id)->child_pd = pd;
    }
  } else {
    rc = rdma_resolve_addr(id, res->ai_src_addr, res->ai_dst_addr, 2000);
    if (rc == 0) rc = rdma_resolve_route(id, 2000);
    if (rc == 0 && qp_init_attr) rc = create_qp(id, pd, qp_init_attr);
  }
  if (rc != 0) {
    const int err = errno;
    rdma_destroy_id(id);
    return fail(err);
  }
  *out = id;
  return 0;
}

SOFTRDMA_EXPORT void rdma_destroy_ep(rdma_cm_id* id) {
  if (id->qp) rdma_destroy_qp(id);
  if (id->srq) rdma_destroy_srq(id);
  rdma_destroy_id(id);
}

SOFTRDMA_EXPORT int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** out) {
  CmId* l = to_id(listen);
  if (!l->synchronous || !out) return fail(EINVAL);
  Event* e = wait_event(l, 1 << 30);
  if (!e) return fail(ETIMEDOUT);
  if (e->event.event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    delete e;
    return fail(EINVAL);
  }
  rdma_cm_id* child = e->event.id;
  // The child gets its own private channel: its later calls block on its own events.
  if (rdma_migrate_id(child, nullptr) != 0) {
    delete e;
    return -1;
  }
  keep_event(to_id(child), e);  // the request (and its private data) stays in child->event
  if (l->has_child_qp_attr) {
    ibv_qp_init_attr attr = l->child_qp_attr;
    if (create_qp(child, l->child_pd, &attr) != 0) {
      const int err = errno;
      rdma_reject(child, nullptr, 0);
      rdma_destroy_id(child);
      return fail(err);
    }
  }
  *out = child;
  return 0;
}

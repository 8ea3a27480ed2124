// rdma_get_devices, and the feature the connection manager does not offer: ECE (it fails
// with EOPNOTSUPP as documented).
#include <cerrno>
#include <cstdlib>

#include "cm/cm_context.hpp"
#include "common/export.hpp"

using namespace softrdma::cm;

SOFTRDMA_EXPORT ibv_context** rdma_get_devices(int* num_devices) {
  ibv_context* ctx = cm_context();
  auto** list = static_cast<ibv_context**>(std::calloc(2, sizeof(ibv_context*)));
  if (!list) {
    errno = ENOMEM;
    return nullptr;
  }
  list[0] = ctx;
  if (num_devices) *num_devices = ctx ? 1 : 0;
  return list;
}

SOFTRDMA_EXPORT void rdma_free_devices(ibv_context** list) {
  std::free(list);
}

SOFTRDMA_EXPORT int rdma_get_remote_ece(rdma_cm_id*, ibv_ece*) {
  errno = EOPNOTSUPP;
  return -1;
}

SOFTRDMA_EXPORT int rdma_set_local_ece(rdma_cm_id*, ibv_ece*) {
  errno = EOPNOTSUPP;
  return -1;
}

SOFTRDMA_EXPORT int rdma_reject_ece(rdma_cm_id* id, const void* private_data,
                                    uint8_t private_data_len) {
  return rdma_reject(id, private_data, private_data_len);
}

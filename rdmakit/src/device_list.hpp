// The system's RDMA devices, as ibv_get_device_list gives them.
#pragma once

#include <infiniband/verbs.h>

#include <cerrno>
#include <memory>
#include <span>

#include "rdmakit/error.hpp"

namespace rdmakit::detail {

class DeviceList {
 public:
  /// Throws Error if the verbs library fails; a kernel without RDMA support (libibverbs
  /// then reports ENOSYS) is a machine with no devices, not an error.
  DeviceList() {
    int count = 0;
    list_.reset(ibv_get_device_list(&count));
    if (!list_ && errno != ENOSYS)
      throw_verbs_error("ibv_get_device_list", errno, "the verbs library");
    count_ = list_ ? static_cast<size_t>(count) : 0;
  }
  std::span<ibv_device* const> devices() const noexcept { return {list_.get(), count_}; }

 private:
  struct Free {
    void operator()(ibv_device** list) const noexcept { ibv_free_device_list(list); }
  };
  std::unique_ptr<ibv_device*, Free> list_;
  size_t count_ = 0;
};

}  // namespace rdmakit::detail

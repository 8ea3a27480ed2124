// An endpoint's wake-up for transports without a descriptor per session (inproc): an
// eventfd that peers write when they find the endpoint asleep. Shared, so that a peer may
// outlive the endpoint without writing to a closed (or reused) descriptor.
#pragma once

#include <memory>

namespace rdmakit::rpc::detail {

class Doorbell {
 public:
  Doorbell();
  ~Doorbell();
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  void ring() noexcept;
  /// Consumes pending rings (non-blocking).
  void clear() noexcept;
  int fd() const noexcept { return fd_; }

 private:
  int fd_;
};

}  // namespace rdmakit::rpc::detail

#include "core/doorbell.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

#include "rdmakit/error.hpp"

namespace rdmakit::rpc::detail {

Doorbell::Doorbell() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (fd_ < 0) throw_verbs_error("eventfd", errno, "an rpc endpoint's doorbell");
}

Doorbell::~Doorbell() {
  close(fd_);
}

void Doorbell::ring() noexcept {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(fd_, &one, sizeof one);  // full counter: already rung
}

void Doorbell::clear() noexcept {
  uint64_t value = 0;
  [[maybe_unused]] ssize_t n = read(fd_, &value, sizeof value);
}

}  // namespace rdmakit::rpc::detail

// Session ids: one per connected peer of an endpoint. A closed session's id never names a
// later session (the generation changes).
#pragma once

#include <cstdint>

namespace rdmakit::rpc {

struct SessionId {
  uint32_t index = UINT32_MAX;
  uint32_t generation = 0;

  bool valid() const noexcept { return index != UINT32_MAX; }
  friend bool operator==(SessionId, SessionId) = default;
};

}  // namespace rdmakit::rpc

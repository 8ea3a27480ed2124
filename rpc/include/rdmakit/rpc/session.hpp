// Session ids: one per connected peer of an endpoint. A closed session's id never names a
// later session (the generation changes).
#pragma once

#include <cstdint>

namespace rdmakit::rpc {

/// Names a session of an endpoint; invalid by default.
struct SessionId {
  /// The session's slot in its endpoint.
  uint32_t index = UINT32_MAX;
  /// Incremented each time the slot is reused.
  uint32_t generation = 0;

  /// False for a default-constructed id (or one a failed open returned).
  bool valid() const noexcept { return index != UINT32_MAX; }
  friend bool operator==(SessionId, SessionId) = default;
};

}  // namespace rdmakit::rpc

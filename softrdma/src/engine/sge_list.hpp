// A work request's scatter/gather entries as the requester keeps them. Copied only as far as
// they are set: a kept request moves into the send queue's lists, and copying all kMaxSge
// slots (512 bytes) there cost more than the rest of the record.
#pragma once

#include <infiniband/verbs.h>

#include <cstring>

#include "engine/memory_access.hpp"

namespace softrdma {

struct SgeList {
  int count = 0;
  ibv_sge at[kMaxSge];  // the first `count` are set

  SgeList() = default;
  /// `n` is at most kMaxSge (requester_check refuses more than the QP's max_send_sge, which
  /// is at most that).
  SgeList(const ibv_sge* sge, int n) : count(n) { copy_from(sge); }
  SgeList(const SgeList& other) : count(other.count) { copy_from(other.at); }
  SgeList& operator=(const SgeList& other) {
    if (this == &other) return *this;  // memcpy onto itself is undefined
    count = other.count;
    copy_from(other.at);
    return *this;
  }

 private:
  void copy_from(const ibv_sge* sge) {
    if (count == 1)
      at[0] = sge[0];  // the common case, without a call
    else if (count > 1)
      std::memcpy(at, sge, sizeof(ibv_sge) * static_cast<size_t>(count));
  }
};

}  // namespace softrdma

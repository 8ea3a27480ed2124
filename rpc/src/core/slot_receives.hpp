// Receives into fixed-size slots of one registered region, as the RDMA transports keep them
// posted (rc on its shared receive queue, ud on its QP).
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "rdmakit/allocator.hpp"

namespace rdmakit::rpc::detail {

/// Posts a receive into each of `slots` (slot s at `region` + s * `slot_bytes`, wr_id
/// `tag | s`) in chains of up to 64, each handed to `post` by its first work request (an
/// SRQ's or a QP's post_recv).
template <typename Post>
void post_slot_receives(std::span<const uint32_t> slots, const RawRegion& region,
                        uint32_t slot_bytes, uint64_t tag, Post&& post) {
  constexpr size_t kChain = 64;
  // Not zeroed as a whole: each entry used is set below, and a repost of a few slots would
  // otherwise clear 3 KiB.
  std::array<ibv_recv_wr, kChain> wrs;
  std::array<ibv_sge, kChain> sges;
  for (size_t done = 0; done < slots.size();) {
    const size_t n = std::min(kChain, slots.size() - done);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t slot = slots[done + i];
      sges[i] = {reinterpret_cast<uintptr_t>(region.data() + size_t{slot} * slot_bytes), slot_bytes,
                 region.local().lkey()};
      wrs[i] = {};
      wrs[i].wr_id = tag | slot;
      wrs[i].sg_list = &sges[i];
      wrs[i].num_sge = 1;
      wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
    }
    post(wrs[0]);
    done += n;
  }
}

}  // namespace rdmakit::rpc::detail

// What softrdma0 reports about itself. The limits are those the engine enforces.
#pragma once

#include <infiniband/verbs.h>
#include <bit>
#include <cstdint>

#include "engine/memory_access.hpp"
#include "engine/registry.hpp"
#include "engine/shared_layout.hpp"

namespace softrdma::limits {

inline constexpr const char* kDeviceName = "softrdma0";
inline constexpr const char* kFirmware = "softrdma 0.1.0";
// Not Mellanox (0x02c9), Amazon (0x1d0f), Chelsio (0x1425) or Intel (0x8086): perftest and
// pyverbs then take their generic paths. vendor_part_id 0 is outside perftest's tables.
inline constexpr uint32_t kVendorId = 0x736f66;
inline constexpr uint32_t kVendorPartId = 0;

inline constexpr int kMaxQpWr = 16384;
inline constexpr int kMaxSge = softrdma::kMaxSge;
inline constexpr int kMaxCqe = (1 << 22) - 1;  // as a ConnectX: consumers ask for 256 Ki
inline constexpr int kMaxQpRdAtom = 16;
static_assert(kMaxQpRdAtom <= static_cast<int>(kReplaySlots),
              "a resent READ or atomic within the depth is answered from the replay slots");
inline constexpr uint32_t kMaxInline = 512;
inline constexpr int kMaxSrqWr = 16384;
inline constexpr uint64_t kMaxMrSize = uint64_t{1} << 40;
inline constexpr uint32_t kMaxMsgSize = 1u << 30;
inline constexpr int kNumCompVectors = 1;
inline constexpr uint8_t kPortNum = 1;
inline constexpr ibv_mtu kMtu = IBV_MTU_4096;
inline constexpr uint32_t kMtuBytes = 4096;
// Multicast: attachments are entries of the registry's table (engine/registry.hpp).
inline constexpr uint32_t kMaxMcastQpAttach = 64;  // groups per QP
inline constexpr uint32_t kMaxMcastGroups = 4096;
inline constexpr uint32_t kUdGrhBytes = 40;

static_assert(kMaxQpWr >= 8 && kMaxSge >= 2, "pyverbs derives random caps from these");
static_assert(kMaxCqe + 1 <= (1 << 22), "CQ rings are sized to the next power of two");
static_assert(std::has_single_bit(static_cast<unsigned>(kMaxQpWr)) &&
                  std::has_single_bit(static_cast<unsigned>(kMaxSrqWr)),
              "receive queues are rounded up to a power of two, which stays within the limit");

}  // namespace softrdma::limits

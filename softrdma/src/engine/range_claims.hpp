// Which registry owns each QP number range of the host (its QP numbers, and the port its
// processes listen on: common/softrdma_port.hpp). A registry claims a range with a file of
// its own in /dev/shm, owner-only, named by the range, its user and random bytes, so that no
// user can take or block another's claim by creating a file first, and no lock is shared
// between users. A claim counts only for a range among its user's candidates (a sequence the
// user's id seeds), so one user cannot claim every range; a claim whose owner's registry
// file is gone is removed by its owner. Two claimers that take one range at once each see the
// other's file once theirs is made, and both look for another.
#pragma once

#include <cstdint>
#include <string>

#include "common/process_lock.hpp"

namespace softrdma {

/// A registry's claim, kept in its header for the processes that map it.
struct RangeClaim {
  ProcessLock lock;  // one process of the registry claims at a time
  uint32_t held;     // a range is claimed
  uint32_t range;
  char name[96];  // the claim file, in the claims directory
};

/// How many ranges a user may claim, and so how many registries it may use at once.
inline constexpr uint32_t kRangeCandidates = 64;

/// The range of the registry at `registry_path`, one of `ranges`: the one `claim` records
/// while its claim file holds, else a new one. Throws std::system_error (ENOSPC) when every
/// candidate range of this user is claimed by others (or its port held).
uint32_t claim_qpn_range(const std::string& registry_path, RangeClaim& claim, uint32_t ranges);

/// The `k`-th candidate range of user `uid`, of `ranges`.
uint32_t candidate_range(uint32_t uid, uint32_t k, uint32_t ranges);

}  // namespace softrdma

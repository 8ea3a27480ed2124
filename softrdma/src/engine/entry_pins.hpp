// Who is inside an entry of the host's registry right now (a region being accessed, a QP
// being delivered into): ibv_dereg_mr and ibv_destroy_qp wait until nobody is. Each process
// holds its pins under its pid, so a process killed inside an access (whose pins never drop)
// is told from a slow one and not waited for. Pins of more processes at once than there are
// named places are counted without a name, and an unnamed pin of a process that died is
// waited for as long as the caller bounds the wait.
#pragma once

#include <atomic>
#include <cstdint>

namespace softrdma {

struct alignas(64) EntryPins {
  static constexpr int kNamed = 7;

  /// Pins the entry for this process (a locked instruction, ordered as seq_cst).
  void pin();
  /// Drops one pin of this process (a release: its accesses come before).
  void unpin();
  /// Nobody but processes that exited (pid_exited: zombies too) holds a pin; their places are
  /// freed. Looks up whether a pinning process lives only while it still holds pins.
  bool drained_but_for_the_dead();

  std::atomic<uint32_t> unnamed{0};
  uint32_t pad = 0;
  // pid << 32 | pins; 0 when free. A process may hold several places (two of its threads
  // may take a free one at once); its pins are the sum.
  std::atomic<uint64_t> named[kNamed] = {};
};
static_assert(sizeof(EntryPins) == 64, "one line per registry entry");

}  // namespace softrdma

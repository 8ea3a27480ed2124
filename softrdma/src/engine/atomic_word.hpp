// The target word of an atomic (fetch-and-add, compare-and-swap, atomic write). A word on
// shared pages, which every process of the host maps, is updated with one CPU atomic
// instruction: atomic with respect to every other softrdma atomic on the host, from any
// process, and to the host CPU's own atomics (so IBV_ATOMIC_GLOB holds). A word that is only
// reached through process_vm_* (a peer's memory outside shared pages) is updated under the
// host's lock for that word instead. Which of the two applies depends on the region alone
// (its pages, and the word's alignment, which is the same in every mapping of them), so every
// accessor of a word makes the same choice.
#pragma once

#include <infiniband/verbs.h>
#include <atomic>
#include <cstdint>

namespace softrdma {

/// The word at `here` (this process's view; null if not mapped here) of a region that is on
/// shared pages or not is updated with a CPU atomic.
inline bool updated_lock_free(const void* here, bool on_shared_pages) {
  return on_shared_pages && here && reinterpret_cast<uintptr_t>(here) % sizeof(uint64_t) == 0;
}

/// What a fetch-and-add or compare-and-swap leaves in a word that held `original`.
inline uint64_t atomic_result(ibv_wr_opcode op, uint64_t original, uint64_t compare_add,
                              uint64_t swap) {
  if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) return original + compare_add;
  return original == compare_add ? swap : original;
}

/// A fetch-and-add or compare-and-swap as one CPU atomic on `word` (8-byte aligned); returns
/// the original value.
inline uint64_t cpu_atomic(ibv_wr_opcode op, void* word, uint64_t compare_add, uint64_t swap) {
  std::atomic_ref<uint64_t> w(*static_cast<uint64_t*>(word));
  if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) return w.fetch_add(compare_add);
  uint64_t expected = compare_add;
  w.compare_exchange_strong(expected, swap);
  return expected;
}

}  // namespace softrdma

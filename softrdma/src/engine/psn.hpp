// Packet sequence numbers as InfiniBand counts them: 24 bits that wrap, compared by their
// distance, half the space ahead and half behind. A requester starts at the sq_psn that
// ibv_modify_qp gives it, its peer's responder expects that same rq_psn: neither is 0 by
// default, so a host that is not the peer cannot guess where the sequence stands.
#pragma once

#include <cstdint>

namespace softrdma::psn {

inline constexpr uint32_t kMask = (1u << 24) - 1;

/// The PSN after `p`.
inline uint32_t next(uint32_t p) {
  return (p + 1) & kMask;
}

/// How far `a` lies ahead of `b` (negative: behind), in (-2^23, 2^23].
inline int32_t distance(uint32_t a, uint32_t b) {
  return static_cast<int32_t>((a - b) << 8) >> 8;
}

/// An acknowledgement's end as a word: one past the last PSN it covers, tagged so that 0
/// still says "none yet" (0 is a PSN like any other).
inline constexpr uint32_t kEndKnown = 1u << 31;
inline uint32_t end_word(uint32_t psn_end) {
  return kEndKnown | (psn_end & kMask);
}
inline bool end_known(uint32_t word) {
  return (word & kEndKnown) != 0;
}
/// Whether an end word covers `psn` (the PSN lies before the end).
inline bool end_covers(uint32_t word, uint32_t psn) {
  return end_known(word) && distance(word & kMask, psn) > 0;
}
/// A well-formed end word: none, or a tagged PSN.
inline bool valid_end_word(uint32_t word) {
  return word == 0 || (word & ~(kEndKnown | kMask)) == 0;
}

}  // namespace softrdma::psn

// Bytes from the kernel's CSPRNG (getrandom), for everything a peer must not guess: memory
// keys, starting PSNs, the host identity that links between hosts present.
#pragma once

#include <cstddef>
#include <cstdint>

namespace softrdma {

/// Fills `out` with `n` random bytes. Never fails: getrandom only waits at boot, before the
/// kernel's pool is seeded, and aborts the process if the kernel refuses (it has none).
void secure_random_bytes(void* out, size_t n);

inline uint32_t secure_random_u32() {
  uint32_t v;
  secure_random_bytes(&v, sizeof v);
  return v;
}

inline uint64_t secure_random_u64() {
  uint64_t v;
  secure_random_bytes(&v, sizeof v);
  return v;
}

}  // namespace softrdma

#include "common/secure_random.hpp"

#include <sys/random.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace softrdma {

void secure_random_bytes(void* out, size_t n) {
  auto* p = static_cast<unsigned char*>(out);
  while (n > 0) {
    const ssize_t got = getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      // A kernel without getrandom (before 3.17) cannot give keys a peer could not guess.
      std::fprintf(stderr, "softrdma: getrandom failed (errno %d): no secure randomness\n", errno);
      std::abort();
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
}

}  // namespace softrdma

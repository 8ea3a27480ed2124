// Diagnostics for softrdma, off unless SOFTRDMA_DEBUG is set in the environment.
#pragma once

#include <cstdio>

namespace softrdma {

bool debug_enabled();

#define SOFTRDMA_DEBUG_LOG(...)                       \
  do {                                                \
    if (::softrdma::debug_enabled()) {                \
      std::fprintf(stderr, "softrdma: " __VA_ARGS__); \
      std::fputc('\n', stderr);                       \
    }                                                 \
  } while (0)

}  // namespace softrdma

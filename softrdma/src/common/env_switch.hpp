// Switches read from the environment: SOFTRDMA_<NAME>=0 turns a mechanism off, as a system
// without it would (the tests' way to run the fallbacks), any other value or none leaves it on.
#pragma once

#include <cstdlib>
#include <cstring>

namespace softrdma {

inline bool switched_off(const char* variable) {
  const char* value = std::getenv(variable);
  return value && std::strcmp(value, "0") == 0;
}

}  // namespace softrdma

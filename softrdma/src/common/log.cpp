#include "common/log.hpp"

#include <cstdlib>

namespace softrdma {

bool debug_enabled() {
  static const bool enabled = std::getenv("SOFTRDMA_DEBUG") != nullptr;
  return enabled;
}

}  // namespace softrdma

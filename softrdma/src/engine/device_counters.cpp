#include "engine/device_counters.hpp"

#include "engine/registry.hpp"

namespace softrdma {

const char* counter_name(Counter c) {
  switch (c) {
    case Counter::kForeignRequests:
      return "foreign_requests";
    case Counter::kOutOfSequence:
      return "out_of_sequence";
    case Counter::kDuplicateRequests:
      return "duplicate_request";
    case Counter::kBadHellos:
      return "bad_hellos";
    case Counter::kRemoteAccessErrors:
      return "resp_remote_access_errors";
    case Counter::kPeersRefused:
      return "peers_refused";
    case Counter::kCount:
      break;
  }
  return "unknown";
}

void count(Counter c) {
  Registry::instance().counters().values[static_cast<size_t>(c)].fetch_add(
      1, std::memory_order_relaxed);
}

uint64_t counted(Counter c) {
  return Registry::instance().counters().values[static_cast<size_t>(c)].load(
      std::memory_order_relaxed);
}

}  // namespace softrdma

// What the device counts of the traffic it refused, host-wide for the user (in the registry),
// as a NIC's hw_counters. Each count also lands in a file of its own, <registry>.counters/
// <name> (owner-only, rewritten at most once a millisecond per process and at exit), which
// softrdma-run's view of the device shows as ports/1/hw_counters, where `rdmakit devices -v`
// and rdma-core's tools read a NIC's.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace softrdma {

enum class Counter : uint32_t {
  // Requests to a connected QP from a host, QP or user that is not its peer: never executed.
  kForeignRequests,
  // Requests from the peer with a PSN outside what the QP expects (ahead of it, or behind all
  // it executed), and first requests of a link that did not prove themselves by their PSN.
  kOutOfSequence,
  // Duplicates answered again (an answer lost with a connection).
  kDuplicateRequests,
  // Connections refused at their first bytes: no softrdma hello, another wire version, or a
  // user on this host other than the one the hello names.
  kBadHellos,
  // Remote access errors that peers' requests caused (a bad rkey, range or right).
  kRemoteAccessErrors,
  // Connections of peers refused for a while after too many remote access errors.
  kPeersRefused,
  kCount,
};

/// The name of `c` in hw_counters.
const char* counter_name(Counter c);

/// Counts one event of `c` for the user's device.
void count(Counter c);
/// The count of `c` so far.
uint64_t counted(Counter c);
/// Writes every counter's file; the directory they are in ("" if it cannot be made).
std::string write_counter_files();

struct DeviceCounters {
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Counter::kCount)> values;
};

}  // namespace softrdma

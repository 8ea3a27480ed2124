// How often applications' looks (wire/application_looks.hpp) read a socket that has been
// finding nothing. In a ping-pong between two hosts the answers to a process's requests
// come carried by the peer's own requests (wire/held_acks.hpp), on its inbound connection,
// and its link's socket stays empty; the recv that finds it so is a system call, most of a
// look's cost. Read on one look in kLookEvery, it lets each look reach the socket that the
// next message comes on sooner (two hosts' `ib_send_lat` and `ib_write_lat` 3% lower). A
// socket found with bytes is read on every look again, so a stream's answers wait no longer.
#pragma once

#include <cstdint>

namespace softrdma::wire {

/// Not thread-safe: the caller holds the lock under which it reads the socket.
class QuietSocket {
 public:
  /// Reads in a row that found no byte, after which the socket counts as quiet.
  static constexpr uint32_t kQuietReads = 8;
  /// A quiet socket is read on one look in this many.
  static constexpr uint32_t kLookEvery = 4;
  static_assert((kLookEvery & (kLookEvery - 1)) == 0, "counted by masking");

  /// Whether this look leaves the socket unread.
  bool skip_this_look() {
    return empty_reads_ == kQuietReads && (++quiet_looks_ & (kLookEvery - 1)) != 0;
  }
  /// What a look's read of the socket found.
  void read(bool found_bytes) {
    if (found_bytes)
      empty_reads_ = 0;
    else if (empty_reads_ < kQuietReads)
      ++empty_reads_;
  }

 private:
  uint32_t empty_reads_ = 0;  // at most kQuietReads
  uint32_t quiet_looks_ = 0;  // looks since the socket went quiet (wraps harmlessly)
};

}  // namespace softrdma::wire

// A message that waits for room in a link's socket: bytes of its own (a copied header, inline
// data), then, possibly, payload left in the requester's registered memory ("borrowed"): a
// large payload that the socket does not take at once is sent from where it is instead of
// copied, as a NIC reads it by DMA while the request is in flight. The application may not
// touch that memory until the request completes, and a request completes by its answer,
// after its last byte was sent; where it completes otherwise (an error, a flush, its QP
// reset or destroyed), the link first copies what it still borrows (own_the_rest).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <vector>

namespace softrdma::wire {

class Outgoing {
 public:
  Outgoing() = default;
  /// The bytes of `iov` from byte `offset` on; iovecs from `first_borrowed` on are borrowed,
  /// the others copied.
  Outgoing(const iovec* iov, int count, size_t offset, int first_borrowed);

  /// Fills `out` (room for `max`) with what is left to send; returns the count (0: done).
  int unsent(iovec* out, int max) const;
  /// `n` more bytes were sent.
  void advance(size_t n);
  /// True while part of the message is still read from the requester's memory.
  bool borrows() const { return !borrowed_.empty(); }
  /// Copies what is still borrowed: the requester's memory is no longer read.
  void own_the_rest();

 private:
  std::vector<char> owned_;  // sent first, from owned_sent_ on
  size_t owned_sent_ = 0;
  std::vector<iovec> borrowed_;  // sent after owned_, front first
};

}  // namespace softrdma::wire

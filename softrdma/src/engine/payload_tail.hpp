// The part of a request's payload that is still in its connection when the responder runs
// the request: a large one from another host, read straight into its destination (a
// WRITE's region, a SEND's receive buffers) instead of into a buffer and copied from there.
#pragma once

#include <sys/uio.h>

#include <cstddef>

namespace softrdma {

class PayloadTail {
 public:
  /// Bytes not read yet.
  virtual size_t remaining() const = 0;
  /// Reads the next bytes into `dst` (memory of this process), filling the entries in order
  /// and each from its start: a target's last bytes, in an entry of their own, land last.
  /// False if the connection failed.
  virtual bool read(const iovec* dst, int count) = 0;

 protected:
  ~PayloadTail() = default;
};

}  // namespace softrdma

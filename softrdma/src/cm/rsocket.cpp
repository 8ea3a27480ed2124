// The rsocket API is not implemented yet: every call fails with ENOSYS, so programs that
// import it (rstream, rcopy, riostream, udpong, and rping's optional rsocket mode) load.
// rpoll and rselect forward to poll/select, which is what they mean for ordinary fds.
#include <poll.h>
#include <rdma/rsocket.h>
#include <sys/select.h>

#include <cerrno>

#include "common/export.hpp"

namespace {
template <typename T = int>
T not_implemented() {
  errno = ENOSYS;
  return static_cast<T>(-1);
}
}  // namespace

SOFTRDMA_EXPORT int rsocket(int, int, int) {
  return not_implemented();
}
SOFTRDMA_EXPORT int rbind(int, const sockaddr*, socklen_t) {
  return not_implemented();
}
SOFTRDMA_EXPORT int rlisten(int, int) {
  return not_implemented();
}
SOFTRDMA_EXPORT int raccept(int, sockaddr*, socklen_t*) {
  return not_implemented();
}
SOFTRDMA_EXPORT int rconnect(int, const sockaddr*, socklen_t) {
  return not_implemented();
}
SOFTRDMA_EXPORT int rshutdown(int, int) {
  return not_implemented();
}
SOFTRDMA_EXPORT int rclose(int) {
  return not_implemented();
}
SOFTRDMA_EXPORT ssize_t rrecv(int, void*, size_t, int) {
  return not_implemented<ssize_t>();
}
SOFTRDMA_EXPORT ssize_t rrecvfrom(int, void*, size_t, int, sockaddr*, socklen_t*) {
  return not_implemented<ssize_t>();
}
SOFTRDMA_EXPORT ssize_t rrecvmsg(int, msghdr*, int) {
  return not_implemented<ssize_t>();
}
SOFTRDMA_EXPORT ssize_t rsend(int, const void*, size_t, int) {
  return not_implemented<ssize_t>();
}
SOFTRDMA_EXPORT ssize_t rsendto(int, const void*, size_t, int, const sockaddr*, socklen_t) {
  return not_implemented<ssize_t>();
}
SOFTRDMA_EXPORT ssize_t rsendmsg(int, const msghdr*, int) {
  return not_implemented<ssize_t>();
}
SOFTRDMA_EXPORT ssize_t rread(int, void*, size_t) {
  return not_implemented<ssize_t>();
}
SOFTRDMA_EXPORT ssize_t rreadv(int, const iovec*, int) {
  return not_implemented<ssize_t>();
}
SOFTRDMA_EXPORT ssize_t rwrite(int, const void*, size_t) {
  return not_implemented<ssize_t>();
}
SOFTRDMA_EXPORT ssize_t rwritev(int, const iovec*, int) {
  return not_implemented<ssize_t>();
}
SOFTRDMA_EXPORT int rpoll(pollfd* fds, nfds_t nfds, int timeout) {
  return poll(fds, nfds, timeout);
}
SOFTRDMA_EXPORT int rselect(int nfds, fd_set* r, fd_set* w, fd_set* e, timeval* t) {
  return select(nfds, r, w, e, t);
}
SOFTRDMA_EXPORT int rgetpeername(int, sockaddr*, socklen_t*) {
  return not_implemented();
}
SOFTRDMA_EXPORT int rgetsockname(int, sockaddr*, socklen_t*) {
  return not_implemented();
}
SOFTRDMA_EXPORT int rsetsockopt(int, int, int, const void*, socklen_t) {
  return not_implemented();
}
SOFTRDMA_EXPORT int rgetsockopt(int, int, int, void*, socklen_t*) {
  return not_implemented();
}
SOFTRDMA_EXPORT int rfcntl(int, int, ...) {
  return not_implemented();
}
SOFTRDMA_EXPORT off_t riomap(int, void*, size_t, int, int, off_t) {
  return not_implemented<off_t>();
}
SOFTRDMA_EXPORT int riounmap(int, void*, size_t) {
  return not_implemented();
}
SOFTRDMA_EXPORT size_t riowrite(int, const void*, size_t, off_t, int) {
  return not_implemented<size_t>();
}

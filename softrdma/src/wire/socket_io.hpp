// Writes that never wait, and the options of every softrdma TCP socket.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>
#include <cstddef>

namespace softrdma::wire {

/// Writes what the socket takes without waiting: the bytes written (0 when it is full), or
/// -1 on error.
ssize_t write_now(int fd, const iovec* iov, int count);
/// TCP_NODELAY and keepalive, as for any latency-sensitive connection.
void tune_socket(int fd);
/// tune_socket, and a send buffer that takes whole large messages from the first one on.
void tune_data_socket(int fd);

}  // namespace softrdma::wire

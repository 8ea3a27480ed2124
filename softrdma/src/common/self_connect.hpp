// A TCP connect() to a port of this host that nobody listens on can connect the socket to
// itself: the kernel may pick the destination port as the source port, and a simultaneous
// open with itself succeeds. What is sent then comes back as if the peer had sent it.
#pragma once

namespace softrdma {

/// The connected socket `fd` is its own peer (same address and port at both ends).
bool connected_to_itself(int fd);

/// Makes close(fd) reset the connection rather than hold its port in TIME_WAIT, which a
/// socket connected to itself has no peer to wait for.
void reset_on_close(int fd);

}  // namespace softrdma

// The host side of the TCP transport. Every softrdma process with a connected QP listens on
// the host's softrdma port with SO_REUSEPORT, so there is no daemon and no single point of
// failure: the kernel hands each incoming connection to one live listener, and any
// listener can serve any QP of the host (the responder reaches QPs through the registry).
#pragma once

namespace softrdma::wire {

/// Makes this process one of the host's listeners; cheap after the first call.
void ensure_listening();

/// Serves one accepted connection until it closes or sends something malformed.
void serve_connection(int fd);

}  // namespace softrdma::wire

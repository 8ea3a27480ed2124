// The host side of the TCP transport. Every softrdma process with a connected QP listens on
// the host's softrdma port with SO_REUSEPORT, so there is no daemon and no single point of
// failure: the kernel hands each incoming connection to one live listener, and any
// listener can serve any QP of the host (the responder reaches QPs through the registry).
#pragma once

namespace softrdma::wire {

/// Makes this process one of the host's listeners; cheap after the first call. One thread
/// serves every inbound connection (wire/inbound_connection.hpp); connections that send no
/// well-formed request are bounded in number and closed after a timeout
/// (SOFTRDMA_UNAUTHENTICATED_TIMEOUT_MS, default 10 s).
void ensure_listening();

}  // namespace softrdma::wire

// The host side of the TCP transport. Every softrdma process with a QP that other hosts may
// reach (not connected to one of its user on this host) listens on the host's softrdma
// port with SO_REUSEPORT, so there is no daemon and no single point of
// failure: the kernel hands each incoming connection to one live listener, and any
// listener can serve any QP of the host (the responder reaches QPs through the registry).
#pragma once

#include <atomic>
#include <cstddef>

namespace softrdma::wire {

struct Arrivals;

/// Binds this process's listening port (that of its user's QP number range) unless it holds
/// it already, so that no other user can take it while this process has QPs: called before
/// a QP number is given out. 0, or the errno of the bind (EADDRINUSE: another user holds the
/// port; a notice says who).
int hold_listen_port();

/// Makes this process one of the host's listeners, on the port it holds; cheap after the
/// first call. One thread
/// serves every inbound connection (wire/inbound_connection.hpp); connections that have not
/// proven themselves (a request taken as from a QP's peer) are bounded in number and closed
/// after a timeout (SOFTRDMA_UNAUTHENTICATED_TIMEOUT_MS, default 10 s).
void ensure_listening();

/// Executes the requests that have arrived on the inbound connections `arrived` names
/// (wire/arrivals.hpp), in the calling thread, unless the serving thread is at it: an
/// application polling its CQ for a peer's SEND, or waiting for its own answer, would
/// otherwise wait for that thread to be scheduled. True if it served them.
bool serve_arrived_requests(const Arrivals& arrived);

/// Connections whose answers an application's poll deferred (while the serving thread
/// stands by, answers go out at the next poll, not before the poll that completed their
/// requests returns; the serving thread sends them at the latest as its nap ends).
inline std::atomic<size_t> deferred_answers{0};
/// Connections that hold acknowledgements back (wire/held_acks.hpp). Applications' calls look
/// at them only on the calls that look at the sockets (one in kLookEvery): in a ping-pong one
/// is held nearly all the time, and looking on every call (a lock, the clock) made each poll
/// that finds nothing three times longer. One that was carried is dropped then, one that fell
/// due (after up to 25 µs) goes out then, and the serving thread sends them as its naps end.
inline std::atomic<size_t> connections_holding_acks{0};
void send_deferred_answers_now();
/// send_deferred_answers_now(), if an application deferred answers, or on a call that looks
/// at the sockets (`looking`) while acknowledgements are held.
inline void send_deferred_answers(bool looking) {
  if (deferred_answers.load(std::memory_order_relaxed) != 0 ||
      (looking && connections_holding_acks.load(std::memory_order_relaxed) != 0))
    send_deferred_answers_now();
}
/// Sends every deferred answer, waiting for the serving thread if it is at it: before a QP
/// goes away or the process exits, the requests it received must be acknowledged (on a NIC
/// the acknowledgement leaves as the completion appears; a peer would otherwise retry until
/// it fails a request that was carried out).
void send_deferred_answers_before_leaving();

}  // namespace softrdma::wire

// What an application thread's own verbs calls do with the sockets to other hosts, on the
// calls that look (one in kLookEvery, wire/arrivals.hpp): an ibv_poll_cq, and an
// ibv_post_send (or ibv_wr_complete) once its send queue's lock is released. What they take
// spares a wake-up of the library's serving threads, and on two cores that wake-up preempts
// the application (architecture.md, "The TCP wire between hosts").
#pragma once

#include <atomic>

#include "wire/arrivals.hpp"

namespace softrdma::wire {

/// Sends the answers earlier calls deferred, takes the answers to this process's requests
/// that arrived on its links, and returns the inbound connections to serve
/// (serve_arrived_requests). Call it holding no QP's or CQ's lock.
Arrivals look_at_sockets();

void look_after_post_now();
/// After a post, holding no lock: on its turn to look, takes what arrived, requests
/// included. Nothing, without a system call, in a process without sockets.
inline void look_after_post() {
  if (watched_for_polls.load(std::memory_order_relaxed) != 0) [[unlikely]]
    look_after_post_now();
}

}  // namespace softrdma::wire

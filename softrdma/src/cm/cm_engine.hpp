// The connection manager's thread: it sleeps in epoll until a listener has a connection to
// accept, a connection has a message (or broke), or a timer is due, and turns each into
// events on the ids' channels. API calls and this thread share one mutex; an application
// thread waiting for an event serves its channel's sockets itself (serving_wait.hpp).
#pragma once

#include <chrono>
#include <functional>
#include <mutex>

#include "cm/cm_objects.hpp"

namespace softrdma::cm {

/// How long a disconnected connection stays in timewait before RDMA_CM_EVENT_TIMEWAIT_EXIT.
/// Long enough that applications tearing down right after DISCONNECTED never see it.
inline constexpr std::chrono::milliseconds kTimewait{1000};

/// How long a connection request keeps being retried while nobody listens yet. A REQ on a
/// NIC is resent while the passive side's CM is slow to answer; this covers servers that
/// replace their listener between two connections (perftest -R does) without a refusal.
inline constexpr std::chrono::milliseconds kRefusedGrace{500};

/// Opens the id's TCP connection to its destination, from its resolved source address,
/// and watches it. 0 or an errno. Caller holds cm_mutex.
int start_connect(CmId* id);

/// The lock over every id's state, taken by API calls and by the CM thread.
std::mutex& cm_mutex();

/// A socket a waiter serves (serving_wait.hpp): its descriptor, and which watch of it.
struct ClaimedSocket {
  int fd;
  uint64_t serial;
};
/// Claims the sockets whose next message sets up or tears down a connection of `ch` (its
/// listeners, connections accepted for them, its ids' connections in a handshake), up to
/// `max` of them in `out`: the CM thread stops watching them until they are released.
/// Returns how many, or max + 1 (claiming none) if there are more. Caller holds cm_mutex.
size_t claim_channel_sockets(const EventChannel* ch, ClaimedSocket* out, size_t max);
/// Gives claimed sockets back to the CM thread. Caller holds cm_mutex.
void release_channel_sockets(const ClaimedSocket* claimed, size_t n);
/// Handles what socket `fd` has ready, as the CM thread would, if it still carries `ch`'s
/// events (it may have been closed and its number reused). Caller holds cm_mutex.
void serve_socket(const EventChannel* ch, int fd);

/// Watches an id's socket: a listener for connections, a connection for messages, or
/// (with `connecting`) a non-blocking connect for its completion. Caller holds cm_mutex.
void watch(CmId* id, bool connecting);
/// Stops watching (before the socket is closed or the id destroyed). Caller holds cm_mutex.
void unwatch(CmId* id);
/// The id's connection waits for an answer again (to an accept or a disconnect): a waiter
/// on its channel serves it. Caller holds cm_mutex.
void handshake_started(CmId* id);

/// Runs `fn` (with cm_mutex held) after `delay`, unless `id` is destroyed first.
void after(CmId* id, std::chrono::milliseconds delay, std::function<void(CmId*)> fn);

/// Sends one message on the id's connection; false if the connection is broken.
bool send_msg(CmId* id, const CmMsg& m);

/// The connection is over: DISCONNECTED now (the QP goes to ERROR when the application
/// takes the event), TIMEWAIT_EXIT after kTimewait.
void disconnected(CmId* id);

/// Closes the id's connection (if any).
void close_connection(CmId* id);
/// Moves the id's RC QP to ERROR (flushing its receives), found by number: the application
/// may destroy the QP at any time, so the CM never follows id->qp from its own thread.
void fail_qp(CmId* id);

/// A request is answered (or its requester gone): it no longer counts against the
/// listener's backlog.
void release_backlog_slot(CmId* id);

}  // namespace softrdma::cm

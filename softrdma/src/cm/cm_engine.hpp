// The connection manager's thread: it sleeps in epoll until a listener has a connection to
// accept, a link has a message (or broke), or a timer is due, and turns each into events on
// the ids' channels. API calls and this thread share one mutex; an application thread
// waiting for an event serves the sockets itself meanwhile (serving_wait.hpp).
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
/// replace their listener between two connections without a refusal. perftest -R does, just
/// after a hand-shake with its client, and its client crashes on a refusal (perftest 4.5
/// retries with ids it freed): on a loaded CI machine the new listener came over 500 ms late.
inline constexpr std::chrono::milliseconds kRefusedGrace{2000};

/// Sends the id's request on a link to its destination: one this process already has to
/// that listener, or a new TCP connection from the id's resolved source address. 0 or an
/// errno. Caller holds cm_mutex.
int start_connect(CmId* id);

/// The lock over every id's state, taken by API calls and by the CM thread.
std::mutex& cm_mutex();

/// Claims the CM's sockets for a thread waiting for an event (serving_wait.hpp): the CM
/// thread stops watching them until they are released. Returns a descriptor that is
/// readable when one of them has something, or -1 when this process has none. Caller
/// holds cm_mutex.
int claim_sockets();
/// Handles what the claimed sockets have ready, as the CM thread would. Caller holds
/// cm_mutex.
void serve_ready_sockets();
/// Gives the sockets back to the CM thread (once the last claimer is done). Caller holds
/// cm_mutex.
void release_sockets();

/// Watches a listening id's socket for connections. Caller holds cm_mutex.
void watch_listener(CmId* id);
/// The id is going away: a listener's socket is closed (with the links it accepted that
/// carry nothing), a connection leaves its link without a word, its timers are dropped.
/// Caller holds cm_mutex.
void unwatch(CmId* id);

/// Runs `fn` (with cm_mutex held) after `delay`, unless `id` is destroyed first.
void after(CmId* id, std::chrono::milliseconds delay, std::function<void(CmId*)> fn);

/// Sends one message of the id's connection on its link; false if the link is broken.
bool send_msg(CmId* id, CmMsg m);

/// The connection is over: DISCONNECTED now (the QP goes to ERROR when the application
/// takes the event), TIMEWAIT_EXIT after kTimewait.
void disconnected(CmId* id);

/// The id's connection leaves its link (if on one). With `tell_peer`, the peer's end, which
/// may still wait for an answer, learns it is gone (kGone), as if the link had broken.
void leave_link(CmId* id, bool tell_peer);
/// Moves the id's RC QP to ERROR (flushing its receives), found by number: the application
/// may destroy the QP at any time, so the CM never follows id->qp from its own thread.
void fail_qp(CmId* id);

/// A request is answered (or its requester gone): it no longer counts against the
/// listener's backlog.
void release_backlog_slot(CmId* id);

}  // namespace softrdma::cm

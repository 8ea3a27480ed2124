// Deferred work of requesters: work requests waiting out an RNR delay or an unanswered
// request. The application's own poll_cq runs what is due; a helper thread, asleep until
// the earliest deadline, covers applications that block in ibv_get_cq_event instead.
#pragma once

#include <atomic>
#include <chrono>
#include <limits>

namespace softrdma {

struct Qp;
using Clock = std::chrono::steady_clock;

/// When a QP is due in the schedule (Qp::progress), or kNever. Written under the schedule's
/// lock; read without it by progress_schedule, whose caller holds the QP's send-queue lock.
struct ProgressEntry {
  static constexpr Clock::rep kNever = std::numeric_limits<Clock::rep>::max();
  std::atomic<Clock::rep> due{kNever};
};

/// Asks for `qp`'s blocked work to be retried at `when` (or earlier). The caller holds
/// qp->sq_mutex and has already queued that work: a request sent to another host schedules
/// its answer's deadline this way, and when the QP is due no later already, nothing is
/// taken (a run of the schedule that took the entry meanwhile waits for that lock, and sees
/// the work).
void progress_schedule(Qp* qp, Clock::time_point when);
/// Forgets `qp`; returns once no progress call runs on it.
void progress_forget(Qp* qp);
/// Runs whatever is due, on one call in a few of each thread. Costs one atomic load when
/// nothing is pending.
void run_due_progress();
/// An application thread armed a CQ and may go to sleep in ibv_get_cq_event: until the
/// application runs due work itself again, the helper runs it at its time, not after the
/// grace it leaves a polling application.
void progress_application_may_sleep();

}  // namespace softrdma

// Deferred work of requesters: work requests waiting out an RNR delay or an unanswered
// request. The application's own poll_cq runs what is due; a helper thread, asleep until
// the earliest deadline, covers applications that block in ibv_get_cq_event instead.
#pragma once

#include <chrono>

namespace softrdma {

struct Qp;
using Clock = std::chrono::steady_clock;

/// Asks for `qp`'s blocked work to be retried at `when` (or earlier).
void progress_schedule(Qp* qp, Clock::time_point when);
/// Forgets `qp`; returns once no progress call runs on it.
void progress_forget(Qp* qp);
/// Runs whatever is due, on one call in a few of each thread. Costs one atomic load when
/// nothing is pending.
void run_due_progress();

}  // namespace softrdma

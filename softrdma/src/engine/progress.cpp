#include "engine/progress.hpp"

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "common/background_thread.hpp"
#include "common/current_pid.hpp"
#include "engine/requester.hpp"

namespace softrdma {
namespace {

struct ProgressState {
  std::mutex mutex;
  std::condition_variable wake;     // the helper thread sleeps here
  std::condition_variable settled;  // progress_forget waits here
  std::map<Qp*, Clock::time_point> due;
  std::multiset<Qp*> running;  // QPs being progressed right now (poll_cq or the helper)
  // When the helper wakes by itself; min() while it is awake (it then sees every entry
  // before it sleeps again). A deadline no earlier needs no wake-up: a request sent
  // across hosts schedules its answer's deadline, and waking the helper for each would
  // cost a thread switch per message.
  Clock::time_point helper_sleeps_until = Clock::time_point::min();
};

// How long due work is left to a polling application's own calls before the helper runs
// it. A thread that polls runs it within microseconds of its time; one outside the library
// for a while (preempted, in a system call, setting up) takes longer. Run from the helper,
// the work would take the QP's locks and its peer's from another thread than the one that
// posts, and revoke their bias to that thread for good (common/biased_lock.hpp): every
// later post and delivery would pay a locked instruction per lock. 200 us was not enough
// for perftest's start (docs/benchmarks.md).
constexpr auto kApplicationGrace = std::chrono::milliseconds(5);

// An application thread armed a CQ since the application last ran due work itself: it may
// be asleep in ibv_get_cq_event, where only the helper can run its work, at once.
std::atomic<bool> g_application_may_sleep{false};

// The calls of run_due_progress, per thread, that look for due work (the first included).
constexpr unsigned kRunEvery = 8;
static_assert((kRunEvery & (kRunEvery - 1)) == 0, "counted by masking");

ProgressState& state() {
  static auto* s = new ProgressState();
  return *s;
}

std::atomic<uint32_t> g_pending{0};
// The process whose helper thread runs (a forked child starts its own). Written under the
// schedule's lock, read without it by progress_schedule.
std::atomic<pid_t> g_helper_pid{0};

// When the helper runs work due at `when`: at once for an application that may be asleep,
// else after the grace.
Clock::time_point helper_time(Clock::time_point when) {
  if (g_application_may_sleep.load(std::memory_order_relaxed)) return when;
  return when > Clock::time_point::max() - kApplicationGrace ? Clock::time_point::max()
                                                             : when + kApplicationGrace;
}

// The schedule's entries and their mirrors in the QPs change together, and a sleeping helper
// learns of every entry due before it wakes; caller holds s.mutex.
void set_due(ProgressState& s, Qp* qp, Clock::time_point when) {
  auto [it, fresh] = s.due.emplace(qp, when);
  if (!fresh && when < it->second) it->second = when;
  qp->progress.due.store(it->second.time_since_epoch().count(), std::memory_order_relaxed);
  g_pending.store(static_cast<uint32_t>(s.due.size()), std::memory_order_relaxed);
  if (helper_time(when) < s.helper_sleeps_until) s.wake.notify_one();
}

void forget_due(ProgressState& s, Qp* qp) {
  s.due.erase(qp);
  qp->progress.due.store(ProgressEntry::kNever, std::memory_order_relaxed);
  g_pending.store(static_cast<uint32_t>(s.due.size()), std::memory_order_relaxed);
}

void run_one(ProgressState& s, std::unique_lock<std::mutex>& lock, Qp* qp) {
  forget_due(s, qp);
  auto mine = s.running.insert(qp);
  lock.unlock();
  std::optional<Clock::time_point> next = requester_progress(*qp);
  lock.lock();
  s.running.erase(mine);
  s.settled.notify_all();
  if (next) set_due(s, qp, *next);
}

// Runs due entries, for the helper those its helper_time has come for; returns when the
// next one will be (for the helper, its helper_time).
Clock::time_point run_due(ProgressState& s, std::unique_lock<std::mutex>& lock, bool helper) {
  for (;;) {
    const auto now = Clock::now();
    Qp* pick = nullptr;
    Clock::time_point earliest = Clock::time_point::max();
    for (auto& [qp, due] : s.due) {
      const Clock::time_point when = helper ? helper_time(due) : due;
      if (when <= now) {
        pick = qp;
        break;
      }
      earliest = std::min(earliest, when);
    }
    if (!pick) return earliest;
    run_one(s, lock, pick);
  }
}

// Progress belongs to the application's threads: the helper runs work that no call of
// theirs ran within kApplicationGrace of its time, or at its time while they may be asleep
// (helper_time).
void helper_thread() {
  ProgressState& s = state();
  std::unique_lock lock(s.mutex);
  for (;;) {
    const auto earliest = run_due(s, lock, /*helper=*/true);
    s.helper_sleeps_until = earliest;
    if (earliest == Clock::time_point::max())
      s.wake.wait(lock);
    else
      s.wake.wait_until(lock, earliest);
    s.helper_sleeps_until = Clock::time_point::min();
  }
}

}  // namespace

void progress_schedule(Qp* qp, Clock::time_point when) {
  // Due no later already: this process's helper knows of that time too, so nothing needs
  // waking. The caller's hold of the send-queue lock orders this load after any run that
  // took the entry and finished (a run takes that lock), and before any run still to take it.
  if (qp->progress.due.load(std::memory_order_relaxed) <= when.time_since_epoch().count() &&
      g_helper_pid.load(std::memory_order_relaxed) == current_pid())
    return;
  ProgressState& s = state();
  std::lock_guard lock(s.mutex);
  set_due(s, qp, when);
  if (g_helper_pid.load(std::memory_order_relaxed) != current_pid()) {
    g_helper_pid.store(current_pid(), std::memory_order_relaxed);
    s.helper_sleeps_until = Clock::time_point::min();  // a new helper scans before it sleeps
    start_background_thread("softrdma-timer", helper_thread);
  }
}

void progress_forget(Qp* qp) {
  ProgressState& s = state();
  std::unique_lock lock(s.mutex);
  forget_due(s, qp);  // no new run starts
  s.settled.wait(lock, [&] { return s.running.count(qp) == 0; });
  forget_due(s, qp);  // a run that was under way schedules it again as it finishes
}

void run_due_progress() {
  if (g_pending.load(std::memory_order_relaxed) == 0) return;
  // Work falls due microseconds to seconds ahead, and a thread that busy-polls calls this
  // millions of times a second, while a request to another host is pending on every call:
  // one call in kRunEvery reads the clock (a vDSO call that cost a cross-host ping-pong's
  // poller 4% of its time) and takes the lock.
  // Initial-exec: a thread_local of a shared library otherwise costs a __tls_get_addr call.
  [[gnu::tls_model("initial-exec")]] static thread_local unsigned calls = 0;
  if ((calls++ & (kRunEvery - 1)) != 0) return;
  ProgressState& s = state();
  std::unique_lock lock(s.mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;
  run_due(s, lock, /*helper=*/false);
  if (g_application_may_sleep.load(std::memory_order_relaxed))
    g_application_may_sleep.store(false, std::memory_order_relaxed);
}

void progress_application_may_sleep() {
  if (g_application_may_sleep.load(std::memory_order_relaxed)) return;
  g_application_may_sleep.store(true, std::memory_order_relaxed);
  if (g_pending.load(std::memory_order_relaxed) == 0) return;
  // A helper asleep past some work's time (the grace) runs it at its time instead; one asleep
  // until the earliest is left asleep, so that an event loop's every arming is not a thread
  // switch.
  ProgressState& s = state();
  std::lock_guard lock(s.mutex);
  for (const auto& [qp, due] : s.due) {
    if (due < s.helper_sleeps_until) {
      s.wake.notify_one();
      return;
    }
  }
}

}  // namespace softrdma

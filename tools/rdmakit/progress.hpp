// A progress line for long runs, on standard error and only when it is a terminal: which
// step of how many, what it is, and for how long it has run. Redrawn four times a second by
// a thread that sleeps in between; erased at the end, so the results stay as they were.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace rdmakit::tool {

class Progress {
 public:
  /// `what` names the run ("write_bw"); `steps` is how many steps it has (e.g. sizes).
  /// Draws nothing unless standard error is a terminal (or `force` is set).
  Progress(std::string what, size_t steps, bool force = false);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// Step `index` (0-based) begins; `label` says what it is ("65536 B").
  void step(size_t index, std::string label);
  /// Runs `print` (which writes whole lines to stdout) with the progress line out of its way.
  template <typename Print>
  void print_above(Print&& print) {
    std::unique_lock lock(mutex_);
    erase();
    print();
    std::fflush(stdout);
    if (drawer_.joinable()) draw(lock);
  }

 private:
  void draw_until_stopped();
  void draw(std::unique_lock<std::mutex>& lock);
  void erase();

  const std::string what_;
  const size_t steps_;
  std::mutex mutex_;
  std::condition_variable wake_;
  size_t index_ = 0;
  std::string label_;
  std::chrono::steady_clock::time_point step_start_;
  size_t drawn_width_ = 0;
  bool stop_ = false;
  std::thread drawer_;  // last: started once the rest is ready
};

}  // namespace rdmakit::tool

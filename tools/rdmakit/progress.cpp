#include "progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace rdmakit::tool {
namespace {

constexpr auto kRedrawEvery = std::chrono::milliseconds(250);

}  // namespace

Progress::Progress(std::string what, size_t steps, bool force)
    : what_(std::move(what)), steps_(steps), step_start_(std::chrono::steady_clock::now()) {
  if (force || isatty(STDERR_FILENO) == 1) drawer_ = std::thread([this] { draw_until_stopped(); });
}

Progress::~Progress() {
  if (!drawer_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  drawer_.join();
}

void Progress::step(size_t index, std::string label) {
  if (!drawer_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    index_ = index;
    label_ = std::move(label);
    step_start_ = std::chrono::steady_clock::now();
  }
  wake_.notify_one();
}

void Progress::draw_until_stopped() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    draw(lock);
    wake_.wait_for(lock, kRedrawEvery);
  }
  erase();  // what follows (the table's footer, an error) starts on a clean line
}

void Progress::erase() {
  if (drawn_width_ == 0) return;
  std::fprintf(stderr, "\r%*s\r", static_cast<int>(drawn_width_), "");
  std::fflush(stderr);
  drawn_width_ = 0;
}

void Progress::draw(std::unique_lock<std::mutex>&) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start_).count();
  char line[160];
  const int n = std::snprintf(line, sizeof line, "%s: %zu/%zu %s, %.1f s", what_.c_str(),
                              index_ + 1, steps_, label_.c_str(), seconds);
  const size_t width = n > 0 ? std::min(static_cast<size_t>(n), sizeof line - 1) : 0;
  // Padded to the last line's width, so a shorter one leaves nothing of it behind.
  std::fprintf(stderr, "\r%s%*s", line,
               static_cast<int>(drawn_width_ > width ? drawn_width_ - width : 0), "");
  std::fflush(stderr);
  drawn_width_ = width;
}

}  // namespace rdmakit::tool

#include "common/background_thread.hpp"

#include <signal.h>

#include <future>
#include <thread>
#include <utility>

namespace softrdma {

void start_background_thread(std::function<void()> body) {
  std::promise<void> running;
  std::future<void> started = running.get_future();
  std::thread([running = std::move(running), body = std::move(body)]() mutable {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    running.set_value();
    body();
  }).detach();
  started.wait();
}

}  // namespace softrdma

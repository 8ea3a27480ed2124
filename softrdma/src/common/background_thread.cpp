#include "common/background_thread.hpp"

#include <pthread.h>
#include <signal.h>

#include <future>
#include <thread>
#include <utility>

namespace softrdma {

void start_named_thread(const char* name, std::function<void()> body) {
  std::promise<void> running;
  std::future<void> started = running.get_future();
  std::thread([name, running = std::move(running), body = std::move(body)]() mutable {
    pthread_setname_np(pthread_self(), name);
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    running.set_value();
    body();
  }).detach();
  started.wait();
}

}  // namespace softrdma

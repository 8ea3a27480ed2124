// Coroutines waiting for something no completion announces: a byte the peer wrote into our
// memory (write_lat), a count other coroutines keep. The thread's poll loop calls
// resume_ready() after every round of the poller.
#pragma once

#include <coroutine>
#include <cstddef>
#include <utility>
#include <vector>

namespace rdmakit::tool {

class Conditions {
  struct Waiter {
    bool (*ready)(Waiter* self);
    std::coroutine_handle<> handle;
  };

 public:
  // co_await until(pred): resumes once pred() holds (at once if it already does). `pred`
  // should be cheap: it is evaluated on every round.
  template <typename Pred>
  class Awaiter : Waiter {
   public:
    Awaiter(Conditions* owner, Pred pred) : Waiter{&test, {}}, owner_(owner), pred_(pred) {}
    Awaiter(const Awaiter&) = delete;
    Awaiter& operator=(const Awaiter&) = delete;
    bool await_ready() { return pred_(); }
    void await_suspend(std::coroutine_handle<> suspended) {
      this->handle = suspended;
      owner_->waiting_.push_back(this);
    }
    void await_resume() const noexcept {}

   private:
    static bool test(Waiter* self) { return static_cast<Awaiter*>(self)->pred_(); }
    Conditions* owner_;
    Pred pred_;
  };

  template <typename Pred>
  Awaiter<Pred> until(Pred pred) {
    return {this, pred};
  }

  // Resumes every waiter whose condition holds; returns how many.
  size_t resume_ready() {
    if (waiting_.empty()) return 0;
    // Resumed coroutines may wait again: they go to the emptied list.
    checking_.swap(waiting_);
    size_t resumed = 0;
    for (Waiter* w : checking_) {
      if (w->ready(w)) {
        ++resumed;
        w->handle.resume();
      } else {
        waiting_.push_back(w);
      }
    }
    checking_.clear();
    return resumed;
  }

 private:
  std::vector<Waiter*> waiting_, checking_;
};

}  // namespace rdmakit::tool

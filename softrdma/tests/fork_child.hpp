// Tests that run part of themselves in a fork()ed child: pipes between parent and child,
// and a child that is always reaped and bounded in time (alarm()). A child runs plain code
// (no gtest) and reports through the pipes and its exit status.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "verbs_fixture.hpp"

namespace softrdma_test {

inline constexpr unsigned kChildAlarmSeconds = 10;

/// Two pipes between the parent and one child; after fork() each side keeps its own ends.
class Link {
 public:
  Link() { ok_ = pipe2(up_, O_CLOEXEC) == 0 && pipe2(down_, O_CLOEXEC) == 0; }
  ~Link() {
    for (int* fd : {&up_[0], &up_[1], &down_[0], &down_[1]}) close_fd(*fd);
  }
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  bool ok() const { return ok_; }
  void become_parent() {
    close_fd(up_[1]);
    close_fd(down_[0]);
    in_ = up_[0];
    out_ = down_[1];
  }
  void become_child() {
    close_fd(up_[0]);
    close_fd(down_[1]);
    in_ = down_[0];
    out_ = up_[1];
  }
  template <typename T>
  bool send(const T& value) {
    return write_all(out_, &value, sizeof value);
  }
  template <typename T>
  bool receive(T* value, Millis timeout = kTimeout) {
    return read_all(in_, value, sizeof *value, timeout);
  }

 private:
  static void close_fd(int& fd) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  bool ok_ = false;
  int up_[2] = {-1, -1};    // child -> parent
  int down_[2] = {-1, -1};  // parent -> child
  int in_ = -1;
  int out_ = -1;
};

/// A child process that is always reaped: Wait() bounds how long it may still run, and the
/// destructor kills and reaps one that was not waited for.
class ReapedChild {
 public:
  ReapedChild() = default;
  ~ReapedChild() {
    if (pid_ > 0) Kill();
  }
  ReapedChild(const ReapedChild&) = delete;
  ReapedChild& operator=(const ReapedChild&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  /// Waits up to `timeout` for the child to end (then kills it); returns the wait status.
  int Wait(Millis timeout = kTimeout) {
    int status = -1;
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_ || r < 0) break;
      if (Clock::now() > deadline) return Kill();
      std::this_thread::sleep_for(Millis{1});
    }
    pid_ = -1;
    return status;
  }
  /// SIGKILLs the child and reaps it; returns the wait status.
  int Kill() {
    kill(pid_, SIGKILL);
    int status = -1;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 protected:
  pid_t pid_ = -1;
};

/// A fork()ed child running `body` (its return value is the exit status). Fork before the
/// parent connects QPs: connecting gives helper threads work, and one inside the allocator
/// while fork() runs leaves the sanitizers' allocator locked in the child (ASan's allocator
/// takes no fork lock).
class Child : public ReapedChild {
 public:
  template <typename Body>
  Child(Link& link, Body body) {
    std::fflush(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      alarm(kChildAlarmSeconds);
      link.become_child();
      _exit(body());
    }
    if (pid_ > 0) link.become_parent();
  }
};

inline ::testing::AssertionResult exited_with(int status, int code) {
  if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == code)
    return ::testing::AssertionSuccess();
  if (status != -1 && WIFEXITED(status))
    return ::testing::AssertionFailure() << "child exited with " << WEXITSTATUS(status);
  if (status != -1 && WIFSIGNALED(status))
    return ::testing::AssertionFailure() << "child killed by signal " << WTERMSIG(status);
  return ::testing::AssertionFailure() << "child did not end in time";
}

}  // namespace softrdma_test

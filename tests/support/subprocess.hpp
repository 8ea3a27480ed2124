// Running other programs from tests: bounded in time, output captured, never left behind.
#pragma once

#include <sys/types.h>
#include <chrono>
#include <string>
#include <vector>

namespace rdmakit::testing {

struct Exit {
  bool timed_out = false;
  int code = -1;       // exit status, when the program exited
  int signal = 0;      // terminating signal, when it was killed
  std::string output;  // stdout and stderr, interleaved

  bool ok() const { return !timed_out && signal == 0 && code == 0; }
  std::string describe() const;
};

/// A running program whose output goes to a temporary file. Killed on destruction.
class Process {
 public:
  Process(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env = {});
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  /// Waits at most `limit`; kills the process (SIGKILL) when it is exceeded.
  Exit wait(std::chrono::milliseconds limit);
  /// Waits at most `limit` for `text` in what the process has printed so far.
  bool printed(const std::string& text, std::chrono::milliseconds limit) const;
  /// What the process has printed so far.
  std::string output_so_far() const;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  std::string output_path_;
  bool reaped_ = false;
};

/// Runs a program to completion (bounded).
Exit run(const std::vector<std::string>& argv, std::chrono::milliseconds limit,
         const std::vector<std::string>& extra_env = {});

/// A TCP port on 127.0.0.1 that nothing listens on right now.
int free_tcp_port();

/// A TCP port free on every address right now, below the kernel's ephemeral range with the
/// `span` ports above it: no connection of this host takes any of them as its own, so a
/// listener bound there long after it was chosen finds it still free (a free_tcp_port() may
/// meanwhile be handed to a connection). -1 if none was found.
int free_tcp_port_below_ephemeral_range(int span);

/// Splits "a b c" on spaces.
std::vector<std::string> words(const std::string& s);

/// `command` followed by the words of `args`.
std::vector<std::string> with_args(std::vector<std::string> command, const std::string& args);

}  // namespace rdmakit::testing

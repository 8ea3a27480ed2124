#include "support/subprocess.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

namespace rdmakit::testing {

std::string Exit::describe() const {
  std::ostringstream s;
  if (timed_out)
    s << "timed out";
  else if (signal)
    s << "killed by signal " << signal;
  else
    s << "exit code " << code;
  s << "\n--- output ---\n" << output;
  return s.str();
}

Process::Process(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env) {
  char path[] = "/tmp/rdmakit-test-XXXXXX";
  int fd = mkstemp(path);
  output_path_ = path;
  pid_ = fork();
  if (pid_ == 0) {
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, STDIN_FILENO);
    setpgid(0, 0);  // own process group: the whole tree is killed on timeout
    for (const std::string& kv : extra_env) putenv(strdup(kv.c_str()));
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(fd);
}

Process::~Process() {
  if (!reaped_ && pid_ > 0) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  unlink(output_path_.c_str());
}

namespace {
std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}
}  // namespace

bool Process::printed(const std::string& text, std::chrono::milliseconds limit) const {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (read_file(output_path_).find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

std::string Process::output_so_far() const {
  return read_file(output_path_);
}

Exit Process::wait(std::chrono::milliseconds limit) {
  Exit e;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  for (;;) {
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (std::chrono::steady_clock::now() > deadline) {
      e.timed_out = true;
      kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  reaped_ = true;
  if (!e.timed_out) {
    if (WIFEXITED(status)) e.code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
  }
  e.output = read_file(output_path_);
  return e;
}

Exit run(const std::vector<std::string>& argv, std::chrono::milliseconds limit,
         const std::vector<std::string>& extra_env) {
  Process p(argv, extra_env);
  return p.wait(limit);
}

int free_tcp_port() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  close(s);
  return ntohs(a.sin_port);
}

int free_tcp_port_below_ephemeral_range(int span) {
  int ephemeral_low = 32768;  // the kernel's default, if its setting cannot be read
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low;
  const int low = 1024, high = ephemeral_low - span;  // ports [low, high) may be chosen
  if (high <= low) return -1;
  std::minstd_rand random{std::random_device{}()};
  for (int tries = 0; tries < 64; ++tries) {
    const int port = low + static_cast<int>(random() % static_cast<unsigned>(high - low));
    const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    const bool bindable = bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(s);
    if (bindable) return port;
  }
  return -1;
}

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::vector<std::string> with_args(std::vector<std::string> command, const std::string& args) {
  for (std::string& w : words(args)) command.push_back(std::move(w));
  return command;
}

}  // namespace rdmakit::testing

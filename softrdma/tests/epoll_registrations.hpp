// How many epoll sets of this process hold descriptor `fd`, from /proc/self/fdinfo: a
// socket in a set costs every message that arrives on it a callback on the sender's CPU.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace softrdma_test {

inline int epoll_registrations(int fd) {
  int found = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(entry.path(), ec).string() != "anon_inode:[eventpoll]")
      continue;
    std::ifstream info("/proc/self/fdinfo/" + entry.path().filename().string());
    for (std::string line; std::getline(info, line);) {
      std::istringstream fields(line);
      std::string key;
      int target = -1;
      if (fields >> key >> target && key == "tfd:" && target == fd) ++found;
    }
  }
  return found;
}

}  // namespace softrdma_test

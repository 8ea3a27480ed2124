#include "shm/unix_socket.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace rdmakit::rpc::detail {

namespace {

// A directory of ours only (made with mode 0700 if it is not there), or false: one another
// user made, a link, or one others may enter is never used, for a socket in it could be
// taken over or reached by them.
bool private_directory(const std::string& dir, std::error_code& error) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    error = {errno, std::system_category()};
    return false;
  }
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & 077) != 0) {
    error = std::make_error_code(std::errc::permission_denied);
    return false;
  }
  return true;
}

std::string from_env(const char* name, const char* fallback = "") {
  const char* value = std::getenv(name);
  return value != nullptr && *value ? value : fallback;
}

}  // namespace

std::string shm_socket_path(const std::string& name, std::error_code& error) {
  if (name.empty() || name.find('/') != std::string::npos || name.size() > 64) {
    error = std::make_error_code(std::errc::invalid_argument);
    return {};
  }
  // In order; server and client take the same one. A directory in the shared temporary
  // directory that another user made first is passed over for the next.
  std::vector<std::string> dirs;
  if (const std::string runtime = from_env("XDG_RUNTIME_DIR"); !runtime.empty())
    dirs.push_back(runtime + "/rdmakit-rpc");
  dirs.push_back(from_env("TMPDIR", "/tmp") + "/rdmakit-rpc-" + std::to_string(geteuid()));
  if (const std::string home = from_env("HOME"); !home.empty())
    dirs.push_back(home + "/.rdmakit-rpc");
  for (const std::string& dir : dirs) {
    error.clear();
    if (private_directory(dir, error)) return dir + "/" + name;
  }
  return {};
}

bool send_message(int socket, const void* bytes, size_t size, int fd) noexcept {
  iovec iov{const_cast<void*>(bytes), size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  return sendmsg(socket, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(size);
}

ssize_t receive_message(int socket, void* bytes, size_t size, int& fd) noexcept {
  fd = -1;
  iovec iov{bytes, size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = recvmsg(socket, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int received = -1;
      std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof received);
      if (fd < 0) {
        fd = received;
      } else {
        close(received);  // one descriptor per message; more is not ours to keep
      }
    }
  }
  return n;
}

}  // namespace rdmakit::rpc::detail

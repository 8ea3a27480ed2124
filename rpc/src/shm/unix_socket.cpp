#include "shm/unix_socket.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace rdmakit::rpc::detail {

std::string shm_socket_path(const std::string& name, std::error_code& error) {
  if (name.empty() || name.find('/') != std::string::npos || name.size() > 64) {
    error = std::make_error_code(std::errc::invalid_argument);
    return {};
  }
  std::string dir;
  if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime != nullptr && *runtime) {
    dir = std::string(runtime) + "/rdmakit-rpc";
  } else {
    dir = "/tmp/rdmakit-rpc-" + std::to_string(getuid());
  }
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    error = {errno, std::system_category()};
    return {};
  }
  // Only we may connect: the directory must be ours and closed to everyone else.
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() ||
      (st.st_mode & 077) != 0) {
    error = std::make_error_code(std::errc::permission_denied);
    return {};
  }
  return dir + "/" + name;
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

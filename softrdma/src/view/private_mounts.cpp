#include "view/private_mounts.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

namespace softrdma::view {
namespace {

constexpr int kQueryTimeoutMs = 10000;  // opening the device and reading its GIDs: milliseconds

std::string failed(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

bool write_proc(const char* path, const std::string& text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

// Every entry of `from` appears in `to` (a fresh tmpfs) as itself: directories and files
// bound to the original, symbolic links copied. `skip` names entries left out.
std::string mirror(const std::string& from, const std::string& to,
                   const std::set<std::string>& skip) {
  DIR* dir = opendir(from.c_str());
  if (!dir) return failed("opendir " + from);
  std::string failure;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || skip.count(name)) continue;
    const std::string source = from + "/" + name, target = to + "/" + name;
    struct stat st {};
    if (lstat(source.c_str(), &st) != 0) continue;  // gone since readdir
    if (S_ISLNK(st.st_mode)) {
      char link[4096];
      const ssize_t n = readlink(source.c_str(), link, sizeof link - 1);
      if (n < 0) continue;
      link[n] = '\0';
      if (symlink(link, target.c_str()) != 0) failure = failed("symlink " + target);
    } else {
      const bool is_dir = S_ISDIR(st.st_mode);
      const int made = is_dir ? mkdir(target.c_str(), 0755)
                              : close(open(target.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
      // MS_REC: a mount tree with locked submounts (in a user namespace) binds only whole.
      if (made != 0 || mount(source.c_str(), target.c_str(), nullptr,
                             MS_BIND | (is_dir ? MS_REC : 0), nullptr) != 0)
        failure = failed("bind " + source);
    }
    if (!failure.empty()) break;
  }
  closedir(dir);
  return failure;
}

std::string mount_tmpfs(const std::string& at) {
  if (mkdir(at.c_str(), 0755) != 0 && errno != EEXIST) return failed("mkdir " + at);
  if (mount("softrdma-view", at.c_str(), "tmpfs", MS_NOSUID, "mode=0755,size=4m") != 0)
    return failed("mount tmpfs on " + at);
  if (mount(nullptr, at.c_str(), nullptr, MS_PRIVATE, nullptr) != 0)
    return failed("make " + at + " private");
  return "";
}

// Runs `work` in a child process and returns what it returned (bounded in time).
std::string in_child(const std::function<std::string()>& work) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return failed("pipe");
  const pid_t pid = fork();
  if (pid < 0) return failed("fork");
  if (pid == 0) {
    close(fds[0]);
    const std::string result = work();
    [[maybe_unused]] ssize_t n = write(fds[1], result.data(), result.size());
    _exit(0);
  }
  close(fds[1]);
  std::string result;
  pollfd p{fds[0], POLLIN, 0};
  for (;;) {
    if (poll(&p, 1, kQueryTimeoutMs) <= 0) {
      kill(pid, SIGKILL);
      result = "the device query did not finish";
      break;
    }
    char buf[512];
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    result.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (result.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
    result = "the device query process failed";
  return result;
}

// The nodes of /dev/infiniband: one per uverbs device the sysfs tree names, and rdma_cm.
std::string add_device_nodes(const std::string& class_dir, const std::string& dev_dir) {
  const std::string nodes = dev_dir + "/infiniband";
  if (mkdir(nodes.c_str(), 0755) != 0) return failed("mkdir " + nodes);
  std::set<std::string> names{"rdma_cm"};
  if (DIR* d = opendir((class_dir + "/infiniband_verbs").c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_type == DT_DIR && e->d_name[0] != '.') names.insert(e->d_name);
    closedir(d);
  }
  for (const std::string& name : names) {
    const std::string node = nodes + "/" + name;
    const int fd = open(node.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0) return failed("create " + node);
    close(fd);
    if (mount("/dev/null", node.c_str(), nullptr, MS_BIND, nullptr) != 0)
      return failed("bind " + node);
  }
  return "";
}

std::string build_and_move(const std::string& staging,
                           const std::function<std::string(const std::string&)>& write_sysfs) {
  const std::string class_dir = staging + "/class", dev_dir = staging + "/dev";
  std::string failure = mount_tmpfs(class_dir);
  if (failure.empty()) failure = mount_tmpfs(dev_dir);
  if (failure.empty()) failure = in_child([&] { return write_sysfs(class_dir); });
  if (failure.empty())
    failure = mirror("/sys/class", class_dir, {"infiniband", "infiniband_verbs"});
  if (failure.empty()) failure = mirror("/dev", dev_dir, {"infiniband"});
  if (failure.empty()) failure = add_device_nodes(class_dir, dev_dir);
  if (!failure.empty()) return failure;
  if (mount(class_dir.c_str(), "/sys/class", nullptr, MS_MOVE, nullptr) != 0)
    return failed("move the view onto /sys/class");
  if (mount(dev_dir.c_str(), "/dev", nullptr, MS_MOVE, nullptr) != 0)
    return failed("move the view onto /dev");
  return "";
}

}  // namespace

std::string enter_private_mount_namespace() {
  if (unshare(CLONE_NEWNS) != 0) {
    if (errno != EPERM) return failed("unshare(CLONE_NEWNS)");
    // Not allowed to mount here: a user namespace of our own, mapping only our ids, so the
    // program keeps its uid and gid.
    const uid_t uid = getuid();
    const gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return failed("unshare(CLONE_NEWUSER)");
    if (!write_proc("/proc/self/setgroups", "deny") ||
        !write_proc("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1") ||
        !write_proc("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1"))
      return failed("map ids in the user namespace");
  }
  // Our mounts stay ours; the host's later mounts (e.g. ip netns add) still reach us.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0)
    return failed("make / a slave mount");
  return "";
}

std::string show_device(const std::function<std::string(const std::string&)>& write_sysfs) {
  // In $TMPDIR when set, as temporary files go: a caller can keep it apart from others.
  const char* tmpdir = std::getenv("TMPDIR");
  std::string pattern = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/softrdma-view.XXXXXX";
  char* staging = mkdtemp(pattern.data());
  if (!staging) return failed("mkdtemp");
  std::string failure = mount_tmpfs(staging);
  if (failure.empty()) failure = build_and_move(staging, write_sysfs);
  umount2(staging, MNT_DETACH);
  rmdir(staging);
  return failure;
}

}  // namespace softrdma::view

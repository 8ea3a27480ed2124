// softrdma-view COMMAND [ARGS...]: runs COMMAND where softrdma's device can be seen as a NIC's
// can (/sys/class/infiniband, /dev/infiniband), then execs it. softrdma-run calls it after
// putting the drop-in libraries first on the library path. SOFTRDMA_DEVICE_VIEW=0 skips it.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/env_switch.hpp"
#include "verbs/device_limits.hpp"
#include "view/private_mounts.hpp"
#include "view/sysfs_tree.hpp"

namespace {

// Already shown, e.g. to a program started by another one under softrdma-run.
bool device_visible() {
  struct stat st {};
  const std::string sysfs = std::string("/sys/class/infiniband/") + softrdma::limits::kDeviceName;
  return stat(sysfs.c_str(), &st) == 0 && stat("/dev/infiniband/rdma_cm", &st) == 0 &&
         S_ISCHR(st.st_mode);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: softrdma-view COMMAND [ARGS...]\n");
    return 2;
  }
  if (!softrdma::switched_off("SOFTRDMA_DEVICE_VIEW") && !device_visible()) {
    std::string failure = softrdma::view::enter_private_mount_namespace();
    if (failure.empty()) failure = softrdma::view::show_device(softrdma::view::write_sysfs_tree);
    if (!failure.empty())
      std::fprintf(stderr,
                   "softrdma-run: %s is not shown in /sys/class/infiniband and /dev/infiniband "
                   "(%s); SOFTRDMA_DEVICE_VIEW=0 skips this step\n",
                   softrdma::limits::kDeviceName, failure.c_str());
  }
  execvp(argv[1], argv + 1);
  std::fprintf(stderr, "softrdma-run: %s: %s\n", argv[1], std::strerror(errno));
  return errno == ENOENT ? 127 : 126;
}

#include "support/other_user.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace fs = std::filesystem;

namespace rdmakit::testing {

OtherUser::OtherUser() {
  if (geteuid() != 0) {
    reason_ = "needs root to run a command as another user";
    return;
  }
  char pattern[] = "/tmp/softrdma-other-user-XXXXXX";
  if (mkdtemp(pattern) == nullptr) {
    reason_ = "mkdtemp failed";
    return;
  }
  dir_ = pattern;
  std::error_code error;
  fs::permissions(dir_,
                  fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                      fs::perms::others_read | fs::perms::others_exec,
                  error);
  const fs::path lib_dir = fs::path(SOFTRDMA_RUN).parent_path() / "softrdma" / "lib";
  if (!error)
    fs::copy(lib_dir, fs::path(dir_) / "lib",
             fs::copy_options::recursive | fs::copy_options::copy_symlinks, error);
  if (!error) fs::copy_file(SOFTRDMA_RUN, fs::path(dir_) / "softrdma-run", error);
  ok_ = !error;
  if (!ok_) reason_ = "cannot copy softrdma for another user: " + error.message();
}

OtherUser::~OtherUser() {
  std::error_code ignored;
  if (!dir_.empty()) fs::remove_all(dir_, ignored);
}

std::vector<std::string> OtherUser::as_user() {
  return {"setpriv", "--reuid", kUid, "--regid", kUid, "--clear-groups"};
}

std::vector<std::string> OtherUser::softrdma_run() const {
  std::vector<std::string> argv = as_user();
  argv.push_back((fs::path(dir_) / "softrdma-run").string());
  return argv;
}

std::vector<std::string> OtherUser::env() const {
  return {"SOFTRDMA_LIB_DIR=" + (fs::path(dir_) / "lib").string()};
}

}  // namespace rdmakit::testing

// Running programs under softrdma as a second user of the host (nobody), as another
// person's jobs on a shared machine would run: softrdma-run and its libraries are copied
// where that user may run them.
#pragma once

#include <string>
#include <vector>

namespace rdmakit::testing {

class OtherUser {
 public:
  static constexpr const char* kUid = "65534";  // nobody

  OtherUser();  // check ok() afterwards; reason() says why not (needs root)
  ~OtherUser();
  OtherUser(const OtherUser&) = delete;
  OtherUser& operator=(const OtherUser&) = delete;

  bool ok() const { return ok_; }
  const std::string& reason() const { return reason_; }
  /// The command prefix that runs the rest as that user under the copy of softrdma-run.
  std::vector<std::string> softrdma_run() const;
  /// The environment that makes the copy find its libraries.
  std::vector<std::string> env() const;
  /// `setpriv` as that user, without softrdma-run.
  static std::vector<std::string> as_user();

 private:
  bool ok_ = false;
  std::string reason_;
  std::string dir_;
};

}  // namespace rdmakit::testing

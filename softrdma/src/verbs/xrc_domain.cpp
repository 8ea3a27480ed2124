// XRC domains (ibv_open_xrcd, ibv_close_xrcd). As in the kernel, a domain opened through a
// file is the file's: every process of the host that opens one through the same file (the
// same inode) is in the same domain, and its XRC SRQs take requests from XRC_RECV QPs of
// any of them. Whether the domain exists (O_CREAT needed to make it, O_EXCL refusing it) is
// answered by the file itself: each holder keeps a shared flock on a description of its
// own, so the domain exists while some process of the host holds it, and ends with the last
// one, even one that dies without closing it.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cstdio>

#include "common/current_pid.hpp"
#include "verbs/objects.hpp"
#include "verbs/ops.hpp"

namespace softrdma {
namespace {

// Identities of domains tied to files have the top bit clear, private ones have it set.
constexpr uint64_t kPrivateDomain = 1ull << 63;

uint64_t file_domain_id(const struct stat& st) {
  return ((static_cast<uint64_t>(st.st_dev) * 0x9E3779B97F4A7C15ull) ^ st.st_ino) & ~kPrivateDomain;
}

uint64_t private_domain_id() {
  static std::atomic<uint32_t> next{0};
  return kPrivateDomain | (static_cast<uint64_t>(current_pid()) << 24) |
         (next.fetch_add(1) & 0xFFFFFF);
}

// Joins (or, with O_CREAT, creates) the domain of the file open as `fd`: returns the
// description holding this process's share of it, or -1 with errno.
int join_file_domain(int fd, int oflags, uint64_t& id) {
  struct stat st;
  if (fstat(fd, &st) != 0) return -1;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  const int share = open(path, O_RDONLY | O_CLOEXEC);
  if (share < 0) return -1;
  // An exclusive lock is refused while another holder (of any process) shares the domain.
  const bool exists = flock(share, LOCK_EX | LOCK_NB) != 0;
  if ((!exists && !(oflags & O_CREAT)) || (exists && (oflags & O_EXCL)) ||
      flock(share, LOCK_SH) != 0) {
    close(share);
    errno = EINVAL;
    return -1;
  }
  id = file_domain_id(st);
  return share;
}

}  // namespace

ibv_xrcd* open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr) {
  constexpr uint32_t kRequired = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  if (!attr || attr->comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if ((attr->comp_mask & kRequired) != kRequired || (attr->oflags & ~(O_CREAT | O_EXCL))) {
    errno = EINVAL;
    return nullptr;
  }
  auto* x = new (std::nothrow) Xrcd();
  if (!x) {
    errno = ENOMEM;
    return nullptr;
  }
  if (attr->fd == -1) {
    x->id = private_domain_id();
  } else if ((x->share_fd = join_file_domain(attr->fd, attr->oflags, x->id)) < 0) {
    delete x;
    return nullptr;
  }
  x->xrcd.context = context;
  return &x->xrcd;
}

int close_xrcd(ibv_xrcd* xrcd) {
  Xrcd* x = to_xrcd(xrcd);
  if (x->users.load() != 0) return EBUSY;  // XRC SRQs or XRC_RECV QPs still in it
  if (x->share_fd >= 0) close(x->share_fd);
  delete x;
  return 0;
}

}  // namespace softrdma

// What the kernel would show of an RDMA device in sysfs, written from what the device says of
// itself through the verbs API: the files rdma-core's tests, UCX and ibdev2netdev-style tools
// read (node, ports, GIDs with their types and network interfaces, the uverbs class).
#pragma once

#include <string>

namespace softrdma::view {

/// Writes `class_dir`/infiniband/<device>/… and `class_dir`/infiniband_verbs/<uverbs>/… for
/// every device ibv_get_device_list() returns. Returns "" on success, else what failed.
std::string write_sysfs_tree(const std::string& class_dir);

}  // namespace softrdma::view

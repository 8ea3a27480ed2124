// The mount namespace in which softrdma-run shows a program the device where programs look
// for it (/sys/class/infiniband, /dev/infiniband), without root and without changing
// anything for other programs: the rest of /sys/class and /dev is bound through unchanged.
#pragma once

#include <functional>
#include <string>

namespace softrdma::view {

/// Moves this (single-threaded) process into a mount namespace of its own, in a user
/// namespace that maps only the caller's ids when the caller may not mount; mounts made
/// afterwards are not seen outside. Returns "" or what failed.
std::string enter_private_mount_namespace();

/// Replaces /sys/class and /dev, in the current mount namespace, with copies in which every
/// existing entry is bound to the original, plus what `write_sysfs` writes under the new
/// /sys/class (it runs in a child process, so that the libraries it loads leave no threads
/// or state here) and in /dev/infiniband a node for each device it wrote under
/// infiniband_verbs/, and rdma_cm. The nodes are bound to /dev/null: programs check that the
/// node exists and is a character device they may open; softrdma's libraries never open it.
/// Returns "" or what failed; a failure before the final moves leaves /sys/class and /dev
/// as they were.
std::string show_device(const std::function<std::string(const std::string&)>& write_sysfs);

}  // namespace softrdma::view

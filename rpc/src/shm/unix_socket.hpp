// Unix-domain sockets of the shm transport: where they live (an owner-only directory),
// and messages that carry a file descriptor.
#pragma once

#include <cstddef>
#include <string>
#include <system_error>

namespace rdmakit::rpc::detail {

/// The socket path of shm://NAME: in the first of $XDG_RUNTIME_DIR/rdmakit-rpc,
/// ${TMPDIR:-/tmp}/rdmakit-rpc-UID and $HOME/.rdmakit-rpc that is a directory of ours closed
/// to everyone else (made with mode 0700 if missing); a directory another user made first is
/// passed over. A permission error when none is.
std::string shm_socket_path(const std::string& name, std::error_code& error);

/// Sends `bytes` with `fd` attached (fd < 0: none). Never blocks. False on failure.
bool send_message(int socket, const void* bytes, size_t size, int fd) noexcept;

/// Receives one message without blocking. Returns its size (0: the peer closed; -1 with
/// errno EAGAIN: nothing there; -1 otherwise: failed). `fd` gets an attached descriptor
/// (or -1); extra descriptors are closed.
ssize_t receive_message(int socket, void* bytes, size_t size, int& fd) noexcept;

}  // namespace rdmakit::rpc::detail

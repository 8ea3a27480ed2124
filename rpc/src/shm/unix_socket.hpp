// Unix-domain sockets of the shm transport: where they live (an owner-only directory),
// and messages that carry a file descriptor.
#pragma once

#include <cstddef>
#include <string>
#include <system_error>

namespace rdmakit::rpc::detail {

/// The socket path of shm://NAME: $XDG_RUNTIME_DIR/rdmakit-rpc/NAME, else
/// /tmp/rdmakit-rpc-UID/NAME. The directory is created with mode 0700 and must belong to
/// us and be closed to others (else Errc::bad_url explains nothing useful: permission error).
std::string shm_socket_path(const std::string& name, std::error_code& error);

/// Sends `bytes` with `fd` attached (fd < 0: none). Never blocks. False on failure.
bool send_message(int socket, const void* bytes, size_t size, int fd) noexcept;

/// Receives one message without blocking. Returns its size (0: the peer closed; -1 with
/// errno EAGAIN: nothing there; -1 otherwise: failed). `fd` gets an attached descriptor
/// (or -1); extra descriptors are closed.
ssize_t receive_message(int socket, void* bytes, size_t size, int& fd) noexcept;

}  // namespace rdmakit::rpc::detail

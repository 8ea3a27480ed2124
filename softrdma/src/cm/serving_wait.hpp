// rdma_get_cm_event's wait. The CM thread turns what arrives on the CM's sockets into
// events; handing each one over from that thread to the application costs a thread switch,
// and setting up a connection pays for two of them on each side. A thread waiting for the
// next event of a channel therefore claims the CM's sockets (all of them, as one epoll set:
// two calls however many there are), sleeps on them beside the channel's fd, and serves
// what arrives itself, under cm_mutex as the CM thread would. Meanwhile the CM thread does
// not watch them (it would wake as well and race the waiter for the work).
#pragma once

namespace softrdma::cm {

/// Rounds of serving that bring no event before a waiter leaves the rest to the CM thread
/// (a round that reads half a message, or another channel's message).
inline constexpr int kServedRounds = 16;

/// Sleeps until `channel_fd` is readable or one of the CM's sockets has something, and
/// serves those sockets. False when it cannot help: this process has no CM sockets.
bool serve_sockets_once(int channel_fd);

}  // namespace softrdma::cm

// rdma_get_cm_event's wait. The CM thread turns what arrives on the CM's sockets into
// events; handing each one over from that thread to the application costs a thread switch,
// and setting up a connection pays for two of them on each side. A thread waiting for the
// next event of a channel therefore watches, beside the channel's fd, the sockets of the
// channel's listeners and of its connections being set up or torn down, and serves what
// arrives itself, under cm_mutex as the CM thread would. Meanwhile the CM thread does not
// watch those sockets (it would wake as well and race the waiter for the work).
#pragma once

#include "cm/cm_objects.hpp"

namespace softrdma::cm {

/// Rounds of serving that bring no event before a waiter leaves the rest to the CM thread
/// (a round that reads half a message, or another id's message that posts nothing).
inline constexpr int kServedRounds = 16;

/// Sleeps until `channel_fd` (the fd of `ch`) is readable or one of `ch`'s sockets has
/// something, and serves those sockets. False when it cannot help: none of the channel's
/// sockets is in a handshake, or more than a waiter watches are.
bool serve_channel_once(EventChannel* ch, int channel_fd);

}  // namespace softrdma::cm

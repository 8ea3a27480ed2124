// The system calls of the message path, which never wait, and the options of every softrdma
// TCP socket. They are the plain system calls, not glibc's: glibc's recv, sendmsg, write and
// epoll_wait are cancellation points, which switch asynchronous cancellation on and off around
// every call (some 50 instructions on each message's path), and a verbs call is no
// cancellation point on a NIC (ibv_poll_cq and ibv_post_send never enter the kernel there).
// A thread cancelled inside one would leave the library mid-step. Under TSan they are glibc's,
// which TSan intercepts: it orders what a socket carries between the threads of a test.
#pragma once

#include <sys/epoll.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <cstddef>

namespace softrdma::wire {

/// Writes what the socket takes without waiting: the bytes written (0 when it is full), or
/// -1 on error.
ssize_t write_now(int fd, const iovec* iov, int count);
/// recv(2) on a non-blocking socket (or with MSG_DONTWAIT).
ssize_t recv_now(int fd, void* buffer, size_t length, int flags);
/// epoll_wait(2) that does not wait: the ready events, or -1.
int ready_now(int epfd, epoll_event* events, int most);
/// Adds one to the counter of the eventfd `fd`.
void notify_eventfd(int fd);
/// TCP_NODELAY and keepalive, as for any latency-sensitive connection.
void tune_socket(int fd);
/// tune_socket, and a send buffer that takes whole large messages from the first one on.
void tune_data_socket(int fd);

}  // namespace softrdma::wire

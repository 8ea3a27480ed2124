// Event channels as librdmacm's: a non-blocking channel says EAGAIN when empty,
// rdma_destroy_id waits until the events it handed out are acknowledged, and a reader of a
// channel that another thread destroys waits instead of failing (event threads such as
// rping's come back to rdma_get_cm_event after the main thread closed the channel).
#include <fcntl.h>
#include <sys/wait.h>

#include <atomic>
#include <thread>

#include "cm_fixture.hpp"

namespace softrdma_test {
namespace {

using CmEventChannel = CmTest;

// An id that has one ADDR_RESOLVED event waiting on `ch` (its port need not listen).
rdma_cm_id* id_with_an_event(rdma_event_channel* ch) {
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) return nullptr;
  sockaddr_in dst = loopback(free_port());
  if (rdma_resolve_addr(id, nullptr, as_sockaddr(&dst), kResolveTimeoutMs) != 0 ||
      !wait_readable(ch->fd, kTimeout)) {
    rdma_destroy_id(id);
    return nullptr;
  }
  return id;
}

TEST_F(CmEventChannel, NonBlockingChannelSaysEagainWhenEmpty) {
  rdma_event_channel* ch = NewChannel();
  ASSERT_TRUE(ch);
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
  rdma_cm_event* event = nullptr;
  EXPECT_EQ(rdma_get_cm_event(ch, &event), -1);
  EXPECT_EQ(errno, EAGAIN);

  rdma_cm_id* id = id_with_an_event(ch);
  ASSERT_TRUE(id);
  ASSERT_EQ(rdma_get_cm_event(ch, &event), 0) << std::strerror(errno);
  EXPECT_EQ(event->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  EXPECT_EQ(event->id, id);
  rdma_ack_cm_event(event);
  EXPECT_EQ(rdma_get_cm_event(ch, &event), -1) << "one event, given out once";
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(rdma_destroy_id(id), 0);
}

TEST_F(CmEventChannel, DestroyIdWaitsUntilItsEventsAreAcknowledged) {
  rdma_event_channel* ch = NewChannel();
  ASSERT_TRUE(ch);
  rdma_cm_id* id = id_with_an_event(ch);
  ASSERT_TRUE(id);
  rdma_cm_event* event = nullptr;
  ASSERT_EQ(rdma_get_cm_event(ch, &event), 0) << std::strerror(errno);

  Watchdog watchdog(kTimeout, "rdma_destroy_id after the acknowledgement");
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    EXPECT_EQ(rdma_destroy_id(id), 0);
    destroyed = true;
  });
  std::this_thread::sleep_for(4 * kQuiet);
  EXPECT_FALSE(destroyed) << "rdma_destroy_id returned with an event not acknowledged";
  EXPECT_EQ(event->id, id) << "the event's id is intact until it is acknowledged";
  rdma_ack_cm_event(event);
  destroyer.join();
  EXPECT_TRUE(destroyed);
}

// In a child process: the readers that must wait for ever are killed with it.
TEST_F(CmEventChannel, ReadersOfADestroyedChannelWaitInsteadOfFailing) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rdma_event_channel* ch = rdma_create_event_channel();
    if (!ch) _exit(10);
    std::thread inside([ch] {  // waiting when the channel goes
      rdma_cm_event* e = nullptr;
      rdma_get_cm_event(ch, &e);
      _exit(11);
    });
    inside.detach();
    std::this_thread::sleep_for(kQuiet);
    rdma_destroy_event_channel(ch);
    rdma_cm_event* e = nullptr;  // coming after it went
    rdma_get_cm_event(ch, &e);
    _exit(12);
  }
  std::this_thread::sleep_for(6 * kQuiet);
  int status = 0;
  const pid_t ended = waitpid(child, &status, WNOHANG);
  kill(child, SIGKILL);
  if (ended == 0) waitpid(child, &status, 0);
  EXPECT_EQ(ended, 0) << "the child ended with "
                      << (WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                                            : "signal " + std::to_string(WTERMSIG(status)))
                      << " (10: no channel, 11/12: a reader returned)";
}

}  // namespace
}  // namespace softrdma_test

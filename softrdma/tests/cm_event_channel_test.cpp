// Event channels as librdmacm's: a non-blocking channel says EAGAIN when empty,
// rdma_destroy_id waits until the events it handed out are acknowledged, and a reader of a
// channel that another thread destroys waits instead of failing (event threads such as
// rping's come back to rdma_get_cm_event after the main thread closed the channel).
// Threads blocked in rdma_get_cm_event serve their channel's handshakes themselves
// (cm/serving_wait.hpp), and leave them to the CM thread when there are too many.
#include <fcntl.h>
#include <sys/wait.h>

#include <atomic>
#include <ostream>
#include <thread>
#include <vector>

#include "fork_child.hpp"

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

// Connections set up and torn down by two threads of one process that only ever block in
// rdma_get_cm_event: `batch` connections at a time (each resolved, connected, established
// on both sides and disconnected), `rounds` times.
struct HandshakeCase {
  const char* name;
  int batch;
  int rounds;
};

void PrintTo(const HandshakeCase& c, std::ostream* out) {
  *out << c.name;
}

// The next event of `ch`, blocking; its type, or -1 if the call failed.
int blocking_event(rdma_event_channel* ch, rdma_cm_id** id = nullptr) {
  rdma_cm_event* e = nullptr;
  if (rdma_get_cm_event(ch, &e) != 0) return -1;
  const int type = e->event;
  if (id) *id = e->id;
  rdma_ack_cm_event(e);
  return type;
}

// An RC QP whose CQs rdma_create_qp makes.
ibv_qp_init_attr small_rc_qp() {
  QpCaps caps;
  caps.send_wr = caps.recv_wr = 4;
  caps.send_sge = caps.recv_sge = 1;
  caps.inline_data = 0;
  return qp_init_attr(IBV_QPT_RC, nullptr, nullptr, caps);
}

// The accepting side: answers every request until `expected` connections ended. 0 or a
// code saying what went wrong.
int serve_connections(rdma_event_channel* ch, int expected) {
  std::vector<rdma_cm_id*> accepted;
  for (int ended = 0; ended < expected;) {
    rdma_cm_id* id = nullptr;
    const int type = blocking_event(ch, &id);
    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
      ibv_qp_init_attr attr = small_rc_qp();
      if (rdma_create_qp(id, nullptr, &attr) != 0 || rdma_accept(id, nullptr) != 0) return 20;
      accepted.push_back(id);
    } else if (type == RDMA_CM_EVENT_DISCONNECTED) {
      ++ended;
    } else if (type != RDMA_CM_EVENT_ESTABLISHED) {
      return 21;
    }
  }
  for (rdma_cm_id* id : accepted) {
    rdma_destroy_qp(id);
    rdma_destroy_id(id);
  }
  return 0;
}

// `count` events of `type` on `ch`, blocking.
bool events_of(rdma_event_channel* ch, int type, int count) {
  for (int i = 0; i < count; ++i)
    if (blocking_event(ch) != type) return false;
  return true;
}

// The connecting side: a batch is resolved one id at a time, connected all at once, and
// disconnected all at once.
int connect_batches(rdma_event_channel* ch, uint16_t port, const HandshakeCase& c) {
  for (int round = 0; round < c.rounds; ++round) {
    std::vector<rdma_cm_id*> ids;
    for (int i = 0; i < c.batch; ++i) {
      rdma_cm_id* id = nullptr;
      sockaddr_in dst = loopback(port);
      ibv_qp_init_attr attr = small_rc_qp();
      if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) return 30;
      ids.push_back(id);
      if (rdma_resolve_addr(id, nullptr, as_sockaddr(&dst), kResolveTimeoutMs) != 0 ||
          !events_of(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 1) ||
          rdma_resolve_route(id, kResolveTimeoutMs) != 0 ||
          !events_of(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 1) ||
          rdma_create_qp(id, nullptr, &attr) != 0)
        return 31;
    }
    rdma_conn_param param{};
    param.retry_count = param.rnr_retry_count = 7;
    for (rdma_cm_id* id : ids)
      if (rdma_connect(id, &param) != 0) return 32;
    if (!events_of(ch, RDMA_CM_EVENT_ESTABLISHED, c.batch)) return 33;
    for (rdma_cm_id* id : ids)
      if (rdma_disconnect(id) != 0) return 34;
    if (!events_of(ch, RDMA_CM_EVENT_DISCONNECTED, c.batch)) return 35;
    for (rdma_cm_id* id : ids) {
      rdma_destroy_qp(id);
      rdma_destroy_id(id);
    }
  }
  return 0;
}

class CmBlockingWaiters : public CmTest, public ::testing::WithParamInterface<HandshakeCase> {};

// In a child process, bounded by its alarm: a lost event would leave both threads blocked.
TEST_P(CmBlockingWaiters, SetUpAndTearDownEveryConnection) {
  const HandshakeCase c = GetParam();
  Link link;
  ASSERT_TRUE(link.ok());
  Child child(link, [c] {
    rdma_event_channel* server_ch = rdma_create_event_channel();
    rdma_event_channel* client_ch = rdma_create_event_channel();
    rdma_cm_id* listener = nullptr;
    sockaddr_in any = loopback(0);
    if (!server_ch || !client_ch || rdma_create_id(server_ch, &listener, nullptr, RDMA_PS_TCP) ||
        rdma_bind_addr(listener, as_sockaddr(&any)) || rdma_listen(listener, 2 * c.batch))
      return 10;
    const uint16_t port = ntohs(rdma_get_src_port(listener));
    int served = -1;
    std::thread server([&] { served = serve_connections(server_ch, c.batch * c.rounds); });
    const int connected = connect_batches(client_ch, port, c);
    server.join();
    rdma_destroy_id(listener);
    rdma_destroy_event_channel(client_ch);
    rdma_destroy_event_channel(server_ch);
    return connected != 0 ? connected : served;
  });
  ASSERT_TRUE(child.started());
  const int status = child.Wait(std::chrono::seconds{kChildAlarmSeconds + 2});
  EXPECT_TRUE(exited_with(status, 0))
      << "20-21: the accepting side failed, 30-35: the connecting side (see the test)";
}

// One connection at a time: every handshake is served by the waiting threads. Eighty at
// once: more than a waiter watches, left to the CM thread.
INSTANTIATE_TEST_SUITE_P(Handshakes, CmBlockingWaiters,
                         ::testing::Values(HandshakeCase{"one_at_a_time", 1, 30},
                                           HandshakeCase{"eighty_at_once", 80, 1}),
                         CaseName{});

}  // namespace
}  // namespace softrdma_test

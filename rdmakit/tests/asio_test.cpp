// Completions awaited inside an Asio io_context: coroutines resumed from Asio handlers,
// sleeping (not spinning) while nothing happens, deadlines still acted on.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <asio/io_context.hpp>
#include <thread>

#include "rdmakit/asio.hpp"
#include "rdmakit/async_queue_pair.hpp"

namespace rdmakit {
namespace {

using namespace std::chrono_literals;

// Two connected RC QPs, each with a CQ that has a completion channel.
struct EventPair {
  Context ctx = Context::open();
  ProtectionDomain pd{ctx};
  CompletionChannel channel_a{ctx}, channel_b{ctx};
  CompletionQueue cq_a{ctx, 256, &channel_a}, cq_b{ctx, 256, &channel_b};
  QueuePair a = QpBuilder(ctx, pd, cq_a).build();
  QueuePair b = QpBuilder(ctx, pd, cq_b).build();
  std::vector<std::byte> memory = std::vector<std::byte>(1 << 16);
  MemoryRegion mr = pd.register_memory(memory.data(), memory.size(), Access::all);
  EventPair() {
    a.connect(b.address(), {IBV_MTU_4096, 4, 4});
    b.connect(a.address(), {IBV_MTU_4096, 4, 4});
  }
};

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

TEST(Asio, CoroutinesRunFromAnIoContext) {
  EventPair p;
  asio::io_context io;
  Poller poller_a(p.cq_a, &p.channel_a), poller_b(p.cq_b, &p.channel_b);
  AsioPoller driver_a(io, poller_a), driver_b(io, poller_b);
  AsyncQueuePair qa(poller_a, p.a), qb(poller_b, p.b);
  std::memcpy(p.memory.data(), "ping", 4);
  Received got;
  std::error_code wrote, read, sent;
  int finished = 0;  // the io_context stops when both coroutines are done
  auto receiver = [&]() -> Task<void> {
    got = co_await qb.recv(p.mr.local().subspan(1024, 64));
    if (++finished == 2) io.stop();
  };
  auto sender = [&]() -> Task<void> {
    wrote = co_await qa.write(p.mr.local().first(4), p.mr.remote().subspan(4096, 4));
    read = co_await qa.read(p.mr.local().subspan(8192, 4), p.mr.remote().subspan(4096, 4));
    sent = co_await qa.send(p.mr.local().first(4));
    if (++finished == 2) io.stop();
  };
  spawn(receiver());
  io.poll();  // the receive is posted before anything is sent (no RNR retry in this test)
  spawn(sender());
  io.run_for(5s);
  EXPECT_FALSE(wrote);
  EXPECT_FALSE(read);
  EXPECT_FALSE(sent);
  EXPECT_EQ(std::memcmp(p.memory.data() + 8192, "ping", 4), 0);
  EXPECT_FALSE(got.error);
  EXPECT_EQ(got.byte_len, 4u);
}

TEST(Asio, AnIdleIoContextSleepsUntilACompletionArrives) {
  EventPair p;
  asio::io_context io;
  Poller poller_b(p.cq_b, &p.channel_b);
  AsioPoller driver(io, poller_b);
  AsyncQueuePair qb(poller_b, p.b);
  Received got;
  auto receiver = [&]() -> Task<void> {
    got = co_await qb.recv(p.mr.local().first(64));
    io.stop();
  };
  spawn(receiver());
  // The peer sends after 300 ms, from a thread of its own (raw verbs).
  std::thread peer([&] {
    std::this_thread::sleep_for(300ms);
    ibv_sge sge = p.mr.local().subspan(128, 8).sge();
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    ibv_send_wr* bad = nullptr;
    ibv_post_send(p.a.get(), &wr, &bad);
  });
  const double cpu_before = cpu_seconds();
  io.run_for(5s);
  const double cpu_used = cpu_seconds() - cpu_before;
  peer.join();
  EXPECT_FALSE(got.error);
  EXPECT_EQ(got.byte_len, 8u);
  // Busy polling for 300 ms would use about 0.3 s of CPU.
  EXPECT_LT(cpu_used, 0.1);
}

TEST(Asio, DeadlinesAreActedOnWhileTheIoContextWaits) {
  EventPair p;
  asio::io_context io;
  Poller poller_b(p.cq_b, &p.channel_b);
  AsioPoller driver(io, poller_b);
  AsyncQueuePair qb(poller_b, p.b);
  Received got;
  auto receiver = [&]() -> Task<void> {
    got = co_await qb.recv(p.mr.local().first(64), {.timeout = 30ms, .stop = nullptr});
    io.stop();
  };
  spawn(receiver());
  io.run_for(5s);
  EXPECT_EQ(got.error, Errc::timed_out);
}

}  // namespace
}  // namespace rdmakit

// The coroutine data path on a loopback pair: every operation kind, backpressure, errors on
// the right side, timeouts, cancellation, and no allocation per operation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "loopback_pair.hpp"
#include "rdmakit/async_queue_pair.hpp"
#include "rdmakit/poller.hpp"
#include "rdmakit/task.hpp"

// Counts heap allocations of this test program, to show the data path makes none. Sanitizers
// bring their own operator new, so the count is only kept in plain builds.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define RDMAKIT_COUNT_ALLOCATIONS 1
// GCC cannot see that the replaced operator new below allocates with malloc.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
static std::atomic<long> g_allocations{0};
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
#endif

namespace rdmakit {
namespace {

using namespace std::chrono_literals;

struct AsyncPair : testing::LoopbackPair {
  Poller poller_a{cq_a};
  Poller poller_b{cq_b};
  AsyncQueuePair qa{poller_a, a};
  AsyncQueuePair qb{poller_b, b};
  std::vector<std::byte> memory = std::vector<std::byte>(1 << 20);
  MemoryRegion mr = pd.register_memory(memory.data(), memory.size(), Access::all);
  LocalBuffer local_a = mr.local().first(1 << 19);
  LocalBuffer local_b = mr.local().subspan(1 << 19);
  RemoteBuffer remote_b = mr.remote().subspan(1 << 19);

  // Polls both sides until `task` finishes; fails the test after 10 s.
  template <typename T>
  T run(Task<T> task) {
    task.start();
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!task.done() && std::chrono::steady_clock::now() < deadline) {
      poller_a.poll();
      poller_b.poll();
    }
    EXPECT_TRUE(task.done()) << "task did not finish within 10 s";
    if constexpr (!std::is_void_v<T>) return task.result();
  }
  void run_until(auto done) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      poller_a.poll();
      poller_b.poll();
    }
    EXPECT_TRUE(done()) << "not done within 10 s";
  }
};

TEST(Coroutines, WriteThenReadBack) {
  AsyncPair p;
  auto src = p.local_a.first(4096);
  for (size_t i = 0; i < src.size(); ++i) src.data()[i] = std::byte(i * 7);
  std::error_code ec = p.run([&]() -> Task<std::error_code> {
    co_return co_await p.qa.write(src, p.remote_b.first(4096));
  }());
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(std::memcmp(p.local_b.data(), src.data(), 4096), 0);
  auto back = p.local_a.subspan(8192, 4096);
  ec = p.run([&]() -> Task<std::error_code> {
    co_return co_await p.qa.read(back, p.remote_b.first(4096));
  }());
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(std::memcmp(back.data(), src.data(), 4096), 0);
}

TEST(Coroutines, SendReceiveWithAndWithoutImmediate) {
  AsyncPair p;
  std::memcpy(p.local_a.data(), "hello", 5);
  Received got, got_imm, got_write_imm;
  // Coroutine lambdas keep their captures in the closure: it must outlive the coroutine.
  auto receiver = [&]() -> Task<void> {
    got = co_await p.qb.recv(p.local_b.first(64));
    got_imm = co_await p.qb.recv(p.local_b.subspan(64, 64));
    got_write_imm = co_await p.qb.recv_imm();
  };
  spawn(receiver());
  p.run([&]() -> Task<void> {
    EXPECT_FALSE(co_await p.qa.send(p.local_a.first(5)));
    EXPECT_FALSE(co_await p.qa.send_with_imm(p.local_a.first(5), 0xC0FFEE));
    EXPECT_FALSE(co_await p.qa.write_with_imm(p.local_a.first(5), p.remote_b.subspan(128, 5), 42));
  }());
  p.run_until([&] { return got_write_imm.imm.has_value(); });
  EXPECT_FALSE(got.error);
  EXPECT_EQ(got.byte_len, 5u);
  EXPECT_FALSE(got.imm);
  EXPECT_EQ(std::memcmp(p.local_b.data(), "hello", 5), 0);
  EXPECT_EQ(got_imm.imm, 0xC0FFEEu);
  EXPECT_EQ(got_write_imm.imm, 42u);
  EXPECT_EQ(std::memcmp(p.local_b.data() + 128, "hello", 5), 0);
}

TEST(Coroutines, AtomicsReturnThePreviousValue) {
  AsyncPair p;
  uint64_t initial = 10;
  std::memcpy(p.local_b.data(), &initial, 8);
  auto result = p.local_a.first(8);
  auto target = p.remote_b.first(8);
  AtomicResult add = p.run(
      [&]() -> Task<AtomicResult> { co_return co_await p.qa.fetch_add(result, target, 5); }());
  EXPECT_FALSE(add.error);
  EXPECT_EQ(add.old_value, 10u);
  AtomicResult miss = p.run([&]() -> Task<AtomicResult> {
    co_return co_await p.qa.compare_swap(result, target, 99, 1);
  }());
  EXPECT_EQ(miss.old_value, 15u);
  AtomicResult hit = p.run([&]() -> Task<AtomicResult> {
    co_return co_await p.qa.compare_swap(result, target, 15, 1);
  }());
  EXPECT_EQ(hit.old_value, 15u);
  uint64_t now;
  std::memcpy(&now, p.local_b.data(), 8);
  EXPECT_EQ(now, 1u);
}

TEST(Coroutines, FullSendQueueSuspendsInsteadOfFailing) {
  testing::LoopbackPair base;
  QueuePair small = QpBuilder(base.ctx, base.pd, base.cq_a).send_depth(4).build();
  QueuePair peer = QpBuilder(base.ctx, base.pd, base.cq_b).build();
  small.connect(peer.address(), {IBV_MTU_4096, 4, 4});
  peer.connect(small.address(), {IBV_MTU_4096, 4, 4});
  Poller poller(base.cq_a);
  AsyncQueuePair q(poller, small);
  std::vector<std::byte> memory(64 * 1024);
  MemoryRegion mr = base.pd.register_memory(memory.data(), memory.size(), Access::all);
  constexpr int kWriters = 200;
  int ok = 0, failed = 0;
  uint32_t most_in_flight = 0;
  auto writer = [&](int n) -> Task<void> {
    std::error_code ec =
        co_await q.write(mr.local().subspan(static_cast<size_t>(n) * 8, 8),
                         mr.remote().subspan(32768 + static_cast<size_t>(n) * 8, 8));
    (ec ? failed : ok)++;
  };
  for (int i = 0; i < kWriters; ++i) {
    spawn(writer(i));
    most_in_flight = std::max(most_in_flight, q.in_flight());
  }
  // Far more than the queue holds were queued, none refused (the first few may have
  // completed at once, while each was the only one in flight).
  EXPECT_GE(most_in_flight, static_cast<uint32_t>(kWriters) - AsyncQueuePair::kMostAtOnceInARow);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (ok + failed < kWriters && std::chrono::steady_clock::now() < deadline) poller.poll();
  EXPECT_EQ(ok, kWriters);
  EXPECT_EQ(failed, 0);
}

// One operation at a time on the poller's only QP: an operation the device completes inside
// ibv_post_send (softrdma on one host) lets its awaiter go on without suspending, but only
// kMostAtOnceInARow times in a row, then it suspends and the thread's polling loop gets its
// turn. Every write lands, in order.
TEST(Coroutines, OperationsThatCompleteAtOnceStillLeaveTheThreadItsTurn) {
  AsyncPair p;
  constexpr uint64_t kWrites = 100;
  uint64_t done = 0;
  auto writer = [&]() -> Task<void> {
    for (uint64_t i = 1; i <= kWrites; ++i) {
      std::memcpy(p.local_a.data(), &i, sizeof i);
      if (co_await p.qa.write(p.local_a.first(8), p.remote_b.first(8))) co_return;
      ++done;
    }
  };
  spawn(writer());
  // Returned to this loop before the last write, whatever the device.
  EXPECT_LE(done, uint64_t{AsyncQueuePair::kMostAtOnceInARow});
  p.run_until([&] { return done == kWrites; });
  uint64_t landed = 0;
  std::memcpy(&landed, p.local_b.data(), sizeof landed);
  EXPECT_EQ(landed, kWrites);
  EXPECT_EQ(p.qa.in_flight(), 0u);
  EXPECT_FALSE(p.qa.failed());
}

// The write's error completion, found at once by its own submission when it is the only
// operation in flight, resumes the awaiter from there.
TEST(Coroutines, RemoteAccessErrorSurfacesOnBothSides) {
  AsyncPair p;
  std::error_code write_error;
  Received responder;
  auto waiting = [&]() -> Task<void> { responder = co_await p.qb.recv(p.local_b.first(64)); };
  spawn(waiting());
  p.run([&]() -> Task<void> {
    RemoteBuffer forged(p.remote_b.address(), 64, p.remote_b.rkey() ^ 0x5a5a);
    write_error = co_await p.qa.write(p.local_a.first(64), forged);
  }());
  p.run_until([&] { return bool(responder.error); });
  EXPECT_EQ(write_error, completion_error(IBV_WC_REM_ACCESS_ERR));
  EXPECT_THAT(write_error.message(), ::testing::HasSubstr("remote access error"));
  EXPECT_TRUE(p.qa.failed());
  // The responder's QP went to ERROR as on a NIC: its pending receive is flushed.
  EXPECT_EQ(responder.error, completion_error(IBV_WC_WR_FLUSH_ERR));
  EXPECT_TRUE(p.qb.failed());
}

TEST(Coroutines, TimeoutOfAPostedReceiveStopsTheQpFirst) {
  AsyncPair p;
  Received got = p.run([&]() -> Task<Received> {
    co_return co_await p.qb.recv(p.local_b.first(64), {.timeout = 20ms, .stop = nullptr});
  }());
  EXPECT_EQ(got.error, Errc::timed_out);
  EXPECT_EQ(got.error, std::errc::timed_out);
  EXPECT_TRUE(p.qb.failed());
  EXPECT_EQ(p.b.state(), IBV_QPS_ERR);
}

TEST(Coroutines, CancellationFromAnotherThread) {
  AsyncPair p;
  std::stop_source stop;
  std::thread canceller([&] {
    std::this_thread::sleep_for(20ms);
    stop.request_stop();
  });
  const std::stop_token token = stop.get_token();
  Received got = p.run([&]() -> Task<Received> {
    co_return co_await p.qb.recv(p.local_b.first(64), {.timeout = {}, .stop = &token});
  }());
  canceller.join();
  EXPECT_EQ(got.error, Errc::canceled);
  EXPECT_EQ(p.qb.in_flight(), 0u);
}

TEST(Coroutines, CancelledBeforePostingNeverReachesTheDevice) {
  AsyncPair p;
  std::stop_source stop;
  stop.request_stop();
  const std::stop_token token = stop.get_token();
  std::error_code ec = p.run([&]() -> Task<std::error_code> {
    co_return co_await p.qa.write(p.local_a.first(8), p.remote_b.first(8),
                                  {.timeout = {}, .stop = &token});
  }());
  EXPECT_EQ(ec, Errc::canceled);
  EXPECT_FALSE(p.qa.failed());  // never posted, so the QP is untouched
}

TEST(Coroutines, CancellationUnderLoadCompletesEveryAwaiter) {
  AsyncPair p;
  std::stop_source stop;
  constexpr int kOps = 500;
  int done = 0, succeeded = 0, canceled = 0, flushed = 0;
  const std::stop_token token = stop.get_token();
  auto reader = [&](int n) -> Task<void> {
    const size_t at = static_cast<size_t>(n % 64) * 4096;
    std::error_code ec = co_await p.qa.read(
        p.local_a.subspan(at, 4096), p.remote_b.subspan(at, 4096), {.timeout = {}, .stop = &token});
    ++done;
    if (!ec)
      ++succeeded;
    else if (ec == Errc::canceled)
      ++canceled;
    else if (ec == completion_error(IBV_WC_WR_FLUSH_ERR))
      ++flushed;
  };
  for (int i = 0; i < kOps; ++i) spawn(reader(i));
  for (int i = 0; i < 3; ++i) p.poller_a.poll();
  stop.request_stop();
  p.run_until([&] { return done == kOps; });
  EXPECT_EQ(done, kOps);
  EXPECT_GT(canceled, 0);
  EXPECT_EQ(succeeded + canceled + flushed, kOps);
  EXPECT_EQ(p.qa.in_flight(), 0u);
}

TEST(Coroutines, NoHeapAllocationPerOperation) {
#ifndef RDMAKIT_COUNT_ALLOCATIONS
  GTEST_SKIP() << "allocations are counted in builds without sanitizers";
#else
  AsyncPair p;
  auto loop = [&](int count) -> Task<int> {
    int ok = 0;
    for (int i = 0; i < count; ++i) {
      if (!co_await p.qa.write(p.local_a.first(8), p.remote_b.first(8))) ++ok;
      if (!co_await p.qa.read(p.local_a.first(8), p.remote_b.first(8))) ++ok;
    }
    co_return ok;
  };
  EXPECT_EQ(p.run(loop(10)), 20);   // warm-up
  Task<int> measured = loop(1000);  // the frame is allocated here, once
  const long before = g_allocations.load();
  measured.start();
  while (!measured.done()) p.poller_a.poll();
  EXPECT_EQ(g_allocations.load() - before, 0);
  EXPECT_EQ(measured.result(), 2000);
#endif
}

TEST(Coroutines, WaitSleepsOnTheChannelUntilACompletion) {
  testing::LoopbackPair base;
  CompletionChannel channel(base.ctx);
  CompletionQueue cq(base.ctx, 64, &channel);
  QueuePair qp = QpBuilder(base.ctx, base.pd, cq).build();
  QueuePair peer = QpBuilder(base.ctx, base.pd, base.cq_b).build();
  qp.connect(peer.address(), {IBV_MTU_4096, 4, 4});
  peer.connect(qp.address(), {IBV_MTU_4096, 4, 4});
  Poller poller(cq, &channel);
  AsyncQueuePair q(poller, qp);
  std::vector<std::byte> memory(4096);
  MemoryRegion mr = base.pd.register_memory(memory.data(), memory.size(), Access::all);
  Received got;
  auto receiver = [&]() -> Task<void> { got = co_await q.recv(mr.local().first(64)); };
  spawn(receiver());
  EXPECT_EQ(poller.wait(30ms), 0);  // nothing yet: sleeps, times out
  std::thread sender([&] {
    std::this_thread::sleep_for(20ms);
    ibv_sge sge = mr.local().subspan(64, 8).sge();
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad;
    ibv_post_send(peer.get(), &wr, &bad);
  });
  const auto start = std::chrono::steady_clock::now();
  int handled = 0;
  while (handled == 0 && std::chrono::steady_clock::now() - start < 5s) handled = poller.wait(1s);
  sender.join();
  EXPECT_EQ(handled, 1);
  EXPECT_FALSE(got.error);
  EXPECT_EQ(got.byte_len, 8u);
}

}  // namespace
}  // namespace rdmakit

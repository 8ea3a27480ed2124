// The order in which an RDMA WRITE's bytes land in the target. A NIC writes a message in
// address order, each byte once, so a program may poll the last byte of its buffer for the
// peer's next message and, once it changes, write its answer from that same buffer
// (perftest's ib_write_lat does exactly this). If the last byte could land twice, the
// second store would overwrite the answer and the ping-pong would stop.
//
// Two processes play that ping-pong for many rounds, on regions every process maps
// (whole pages: plain memory copies) and on private ones (the kernel copies).
#include <atomic>
#include <ostream>
#include <string>
#include <thread>

#include "child_verbs.hpp"

namespace softrdma_test {
namespace {

struct PingPongCase {
  const char* name;
  size_t region_bytes;   // registered on each side
  size_t message_bytes;  // written each round, ending in the marker byte
  uint64_t rounds;       // at most: the ping-pong also stops after kPlayBudget
};

constexpr size_t kMinimumMessage = 3;

void PrintTo(const PingPongCase& c, std::ostream* out) {
  *out << c.name;
}

// The ping-pong stops early, still checking every round it plays, when it has run this long:
// on a loaded or single-CPU machine each round may wait for the peer to be scheduled.
constexpr Millis kPlayBudget{4000};
// How long one side waits for the other's message or its own completion: far beyond any
// scheduling delay, so a round that takes this long lost its message.
constexpr Millis kRoundTimeout{3000};
static_assert(kPlayBudget + kRoundTimeout < std::chrono::seconds{kChildAlarmSeconds});

// Pings are odd and pongs even, so neither side mistakes its own marker for the peer's.
uint8_t ping_marker(uint64_t round) {
  return static_cast<uint8_t>(1 + 2 * (round % 127));
}
uint8_t pong_marker(uint64_t round) {
  return static_cast<uint8_t>(ping_marker(round) + 1);
}

// One side of the ping-pong over `qp`, writing `message` bytes of `slot` (registered as
// `lkey`) to the peer's. The client stores a ping in its own last byte and writes; the
// server waits for it in its last byte, stores a pong there and writes back. Returns an
// empty string, or what went wrong in which round.
std::string play(bool client, ibv_qp* qp, ibv_cq* cq, uint8_t* slot, uint32_t lkey,
                 const Endpoint& peer, size_t message, uint64_t rounds) {
  std::atomic_ref<uint8_t> marker(slot[message - 1]);
  const ibv_sge sge{reinterpret_cast<uintptr_t>(slot), static_cast<uint32_t>(message), lkey};
  auto write = [&](uint64_t round) {
    if (post_send(qp, rdma_wr(round, IBV_WR_RDMA_WRITE, peer.addr, peer.rkey), {sge}) != 0)
      return false;
    ibv_wc wc{};
    return poll_wc(cq, kRoundTimeout, &wc) && wc.status == IBV_WC_SUCCESS;
  };
  // Spins, as a latency test would, but lets the peer run when it may share this CPU.
  auto await = [&](uint8_t expected) {
    const auto deadline = Clock::now() + kRoundTimeout;
    for (uint32_t spins = 1; marker.load(std::memory_order_acquire) != expected; ++spins) {
      if (spins % 1024 != 0) continue;
      if (Clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  };
  // Both sides stop after the same round: the client says which in the message's first
  // byte. The server reads it as soon as the ping's last byte is there (bytes land in order),
  // before it answers: once the pong is out, the next ping may overwrite it.
  static_assert(kMinimumMessage >= 2, "the first byte is the stop flag, the last the marker");
  std::atomic_ref<uint8_t> last_round(slot[0]);
  const auto started = Clock::now();
  const auto stop_at = started + kPlayBudget;
  // What a failed round saw: the whole message as it stands, and when.
  auto failed = [&](uint64_t r, const char* what) {
    std::string out =
        "round " + std::to_string(r) + ", " +
        std::to_string(std::chrono::duration_cast<Millis>(Clock::now() - started).count()) +
        " ms in: " + what + "; the message holds";
    for (size_t i = 0; i < message && i < 16; ++i)
      out += " " + std::to_string(std::atomic_ref<uint8_t>(slot[i]).load());
    return out;
  };
  for (uint64_t r = 0;; ++r) {
    bool last = false;
    if (client) {
      last = r + 1 == rounds || Clock::now() > stop_at;
      last_round.store(last, std::memory_order_relaxed);
      marker.store(ping_marker(r), std::memory_order_relaxed);
    } else {
      if (!await(ping_marker(r))) return failed(r, "no ping");
      last = last_round.load(std::memory_order_relaxed) != 0;
      marker.store(pong_marker(r), std::memory_order_relaxed);
    }
    if (!write(r)) return failed(r, "the WRITE did not complete");
    if (client && !await(pong_marker(r))) return failed(r, "no pong");
    if (last) break;
  }
  return {};
}

class WriteOrderTest : public MultiProcessFixture,
                       public ::testing::WithParamInterface<PingPongCase> {};

TEST_P(WriteOrderTest, PingPongPollingTheLastByteNeverStalls) {
  const PingPongCase c = GetParam();
  ASSERT_GE(c.message_bytes, kMinimumMessage);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const uint64_t rounds = c.rounds / 20;  // instrumented code is slower; the child has 10 s
#else
  const uint64_t rounds = c.rounds;
#endif
  Child child(link_, [this, c, rounds] {
    ChildVerbs v;
    if (!open_child_verbs(v, c.region_bytes, 0)) return child_fail(2, "open");
    Endpoint parent;
    if (!child_connect(link_, v, &parent)) return child_fail(3, "connect");
    const std::string failed =
        play(false, v.qp, v.cq, v.buffer.data(), v.mr->lkey, parent, c.message_bytes, rounds);
    if (!failed.empty()) return child_fail(4, failed.c_str());
    return 0;
  });
  ASSERT_TRUE(child.started());
  Buffer slot = NewBuffer(c.region_bytes, kRemoteAccess, 0);
  Endpoint peer;
  ASSERT_NO_FATAL_FAILURE(ConnectToChild(&slot, RcParams{}, &peer));
  EXPECT_EQ(play(true, qp_, cq_, slot.data(), slot.lkey(), peer, c.message_bytes, rounds), "");
  EXPECT_TRUE(exited_with(child.Wait(), 0));
}

// A region of whole pages is mapped by every process; a smaller one is not.
INSTANTIATE_TEST_SUITE_P(
    Sizes, WriteOrderTest,
    ::testing::Values(PingPongCase{"8_bytes_on_shared_pages", 4096, 8, 3'000'000},
                      PingPongCase{"3_bytes_on_shared_pages", 4096, 3, 200'000},
                      PingPongCase{"4_KiB_on_shared_pages", 4096, 4096, 100'000},
                      PingPongCase{"8_bytes_private", 8, 8, 40'000},
                      PingPongCase{"13_bytes_private", 13, 13, 40'000}),
    [](const ::testing::TestParamInfo<PingPongCase>& param) {
      return std::string(param.param.name);
    });

}  // namespace
}  // namespace softrdma_test

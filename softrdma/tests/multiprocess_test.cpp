// RC between two processes of one host (the test and a fork()ed child, each with its own
// device context): one-sided access to a peer that never calls into the library, a peer
// that dies (and UD datagrams to one), and deregistration while the peer is writing.
//
// A child runs plain code (no gtest), reports through a pipe and its exit status, and is
// bounded by alarm(); the parent reaps every child it forks.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <vector>

#include "child_verbs.hpp"

namespace softrdma_test {
namespace {

class MultiProcessTest : public MultiProcessFixture {
 protected:
  /// Fetch-and-adds of 1 from four children, `adds` each, on one word of a region of
  /// `region_bytes` of this process; checks that none is lost.
  void FourProcessesAddToOneWord(size_t region_bytes, uint64_t adds);
};

// The child never polls nor otherwise calls into the library after connecting: one-sided
// operations on its memory still complete, as a NIC serves them without the host's help.
TEST_F(MultiProcessTest, OneSidedOperationsOnAPeerThatNeverPolls) {
  constexpr size_t kSize = 4096;
  constexpr size_t kWritten = 2048;
  constexpr uint64_t kAdd = 5;
  Child child(link_, [this] {
    ChildVerbs v;
    if (!open_child_verbs(v, kSize, 0xc1)) return child_fail(2, "open");
    Endpoint parent;
    if (!child_connect(link_, v, &parent)) return child_fail(3, "connect");
    uint8_t written = 0;
    if (!link_.receive(&written, Millis{8000})) return child_fail(4, "no verdict request");
    uint64_t word = 0;
    std::memcpy(&word, v.buffer.data() + kWritten, 8);
    if (!v.buffer.all(written, 0, kWritten)) return child_fail(5, "written bytes");
    if (word != 0xc1c1c1c1c1c1c1c1ull + kAdd) return child_fail(6, "atomic result");
    if (!v.buffer.all(0xc1, kWritten + 8, kSize - kWritten - 8))
      return child_fail(7, "bytes past the writes");
    return 0;
  });
  ASSERT_TRUE(child.started());
  Endpoint peer;
  ASSERT_NO_FATAL_FAILURE(ConnectToChild(nullptr, RcParams{}, &peer));
  ASSERT_EQ(peer.length, kSize);

  Buffer local = NewBuffer(kSize, kRemoteAccess, 0);
  // Read what the child initialised.
  ASSERT_EQ(
      post_send(qp_, rdma_wr(1, IBV_WR_RDMA_READ, peer.addr, peer.rkey), {local.sge(0, kSize)}), 0);
  EXPECT_TRUE(completed(poll_one(cq_), 1));
  EXPECT_TRUE(local.all(0xc1));
  // Write, then read back.
  local.fill(0x7e);
  ASSERT_EQ(
      post_send(qp_, rdma_wr(2, IBV_WR_RDMA_WRITE, peer.addr, peer.rkey), {local.sge(0, kWritten)}),
      0);
  EXPECT_TRUE(completed(poll_one(cq_), 2));
  local.fill(0);
  ASSERT_EQ(
      post_send(qp_, rdma_wr(3, IBV_WR_RDMA_READ, peer.addr, peer.rkey), {local.sge(0, kWritten)}),
      0);
  EXPECT_TRUE(completed(poll_one(cq_), 3));
  EXPECT_TRUE(local.all(0x7e, 0, kWritten));
  // An atomic on the child's memory.
  ASSERT_EQ(
      post_send(qp_,
                atomic_wr(4, IBV_WR_ATOMIC_FETCH_AND_ADD, peer.addr + kWritten, peer.rkey, kAdd),
                {local.sge(kWritten, 8)}),
      0);
  EXPECT_TRUE(completed(poll_one(cq_), 4));
  EXPECT_TRUE(local.all(0xc1, kWritten, 8)) << "the original value comes back";

  // The child checks its memory itself.
  ASSERT_TRUE(link_.send(uint8_t{0x7e}));
  EXPECT_TRUE(exited_with(child.Wait(), 0));
}

// Registering memory that replaced an unmapped, deregistered range (same address): the
// peer must see the new memory, not the pages the old registration had shared.
TEST_F(MultiProcessTest, ReregisteringRemappedMemoryExposesTheNewPages) {
  constexpr size_t kSize = 4096;
  Child child(link_, [this] {
    ChildVerbs v;
    if (!open_child_verbs(v, kSize, 0xc1)) return child_fail(2, "open");
    void* p = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return child_fail(3, "mmap");
    std::memset(p, 0xa1, kSize);
    ibv_mr* old_mr = ibv_reg_mr(v.pd, p, kSize, kRemoteAccess);
    if (!old_mr || ibv_dereg_mr(old_mr) != 0 || munmap(p, kSize) != 0) return child_fail(4, "old");
    if (mmap(p, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != p)
      return child_fail(5, "remap");
    std::memset(p, 0xb2, kSize);
    ibv_mr* mr = ibv_reg_mr(v.pd, p, kSize, kRemoteAccess);
    if (!mr) return child_fail(6, "new registration");
    const Endpoint mine{v.qp->qp_num, mr->rkey, reinterpret_cast<uintptr_t>(p), kSize};
    Endpoint parent;
    uint8_t ready = 0;
    if (!link_.send(mine) || !link_.receive(&parent) ||
        rc_connect(v.qp, parent.qpn, v.gid, RcParams{}) != 0 || !link_.send(kReady) ||
        !link_.receive(&ready))
      return child_fail(7, "connect");
    uint8_t done = 0;
    return link_.receive(&done, Millis{8000}) ? 0 : child_fail(8, "no verdict request");
  });
  ASSERT_TRUE(child.started());
  Endpoint peer;
  ASSERT_NO_FATAL_FAILURE(ConnectToChild(nullptr, RcParams{}, &peer));
  Buffer local = NewBuffer(kSize, kRemoteAccess, 0);
  ASSERT_EQ(
      post_send(qp_, rdma_wr(1, IBV_WR_RDMA_READ, peer.addr, peer.rkey), {local.sge(0, kSize)}), 0);
  EXPECT_TRUE(completed(poll_one(cq_), 1));
  EXPECT_TRUE(local.all(0xb2)) << "read the old, unmapped pages";
  ASSERT_TRUE(link_.send(uint8_t{1}));
  EXPECT_TRUE(exited_with(child.Wait(), 0));
}

// A region registered after another one was deregistered gets a new memfd, which may reuse
// the old one's number: a peer that reached the old region must reach the new pages, not the
// dead memfd it mapped before.
TEST_F(MultiProcessTest, APeersNewRegionOnAReusedMemfdNumberIsReachedNotTheOldOne) {
  constexpr size_t kSize = 4096;
  Child child(link_, [this] {
    ChildVerbs v;
    if (!open_child_verbs(v, kSize, 0xc1)) return child_fail(2, "open");
    auto region = [&v](uint8_t fill, ibv_mr** mr) -> void* {
      void* p = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) return nullptr;
      std::memset(p, fill, kSize);
      *mr = ibv_reg_mr(v.pd, p, kSize, kRemoteAccess);
      return *mr ? p : nullptr;
    };
    ibv_mr* first = nullptr;
    void* p1 = region(0xa1, &first);
    if (!p1) return child_fail(3, "first region");
    const Endpoint mine{v.qp->qp_num, first->rkey, reinterpret_cast<uintptr_t>(p1), kSize};
    Endpoint parent;
    uint8_t step = 0;
    if (!link_.send(mine) || !link_.receive(&parent) ||
        rc_connect(v.qp, parent.qpn, v.gid, RcParams{}) != 0 || !link_.send(kReady) ||
        !link_.receive(&step))
      return child_fail(4, "connect");
    if (!link_.receive(&step, Millis{8000})) return child_fail(5, "the parent did not read");
    if (ibv_dereg_mr(first) != 0) return child_fail(6, "deregister");
    ibv_mr* second = nullptr;
    auto* p2 = static_cast<uint8_t*>(region(0xb2, &second));
    if (!p2) return child_fail(7, "second region");
    const Endpoint next{v.qp->qp_num, second->rkey, reinterpret_cast<uintptr_t>(p2), kSize};
    if (!link_.send(next) || !link_.receive(&step, Millis{8000}))
      return child_fail(8, "the parent did not write");
    for (size_t i = 0; i < kSize; ++i)
      if (p2[i] != 0x7e) return child_fail(9, "the write went elsewhere");
    return 0;
  });
  ASSERT_TRUE(child.started());
  Endpoint peer;
  ASSERT_NO_FATAL_FAILURE(ConnectToChild(nullptr, RcParams{}, &peer));
  Buffer local = NewBuffer(kSize, kRemoteAccess, 0);
  ASSERT_EQ(
      post_send(qp_, rdma_wr(1, IBV_WR_RDMA_READ, peer.addr, peer.rkey), {local.sge(0, kSize)}), 0);
  EXPECT_TRUE(completed(poll_one(cq_), 1));
  EXPECT_TRUE(local.all(0xa1));
  ASSERT_TRUE(link_.send(uint8_t{1}));
  Endpoint second;
  ASSERT_TRUE(link_.receive(&second)) << "no second region from the child";
  ASSERT_EQ(
      post_send(qp_, rdma_wr(2, IBV_WR_RDMA_READ, second.addr, second.rkey), {local.sge(0, kSize)}),
      0);
  EXPECT_TRUE(completed(poll_one(cq_), 2));
  EXPECT_TRUE(local.all(0xb2)) << "read the first region's dead pages";
  local.fill(0x7e);
  ASSERT_EQ(post_send(qp_, rdma_wr(3, IBV_WR_RDMA_WRITE, second.addr, second.rkey),
                      {local.sge(0, kSize)}),
            0);
  EXPECT_TRUE(completed(poll_one(cq_), 3));
  ASSERT_TRUE(link_.send(uint8_t{2}));
  EXPECT_TRUE(exited_with(child.Wait(), 0));
}

// Registration copies only the pages that hold data into the shared pages it puts in the
// region's place (the others read as zeros either way), and deregistration copies back only
// the shared pages that hold data: pages written before, pages a peer wrote into a hole, and
// zeros everywhere else, before and after.
TEST_F(MultiProcessTest, APartlyWrittenRegionKeepsItsPagesAndReadsZerosElsewhere) {
  constexpr size_t kPage = 4096, kPages = 64, kSize = kPage * kPages;
  constexpr size_t kWrittenPages[] = {3, 4, 40};
  constexpr size_t kPeerWrites = 10;  // a page nobody touched before the peer's WRITE
  auto expected = [&](size_t page, bool after_peer) -> uint8_t {
    if (std::find(std::begin(kWrittenPages), std::end(kWrittenPages), page) !=
        std::end(kWrittenPages))
      return 0xd4;
    return after_peer && page == kPeerWrites ? 0x5a : 0;
  };
  Child child(link_, [&] {
    ChildVerbs v;
    if (!open_child_verbs(v, kPage, 0xc1)) return child_fail(2, "open");
    auto* p = static_cast<uint8_t*>(
        mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (p == MAP_FAILED) return child_fail(3, "mmap");
    for (size_t page : kWrittenPages) std::memset(p + page * kPage, 0xd4, kPage);
    ibv_mr* mr = ibv_reg_mr(v.pd, p, kSize, kRemoteAccess);
    if (!mr) return child_fail(4, "register");
    const Endpoint mine{v.qp->qp_num, mr->rkey, reinterpret_cast<uintptr_t>(p), kSize};
    Endpoint parent;
    uint8_t step = 0;
    if (!link_.send(mine) || !link_.receive(&parent) ||
        rc_connect(v.qp, parent.qpn, v.gid, RcParams{}) != 0 || !link_.send(kReady) ||
        !link_.receive(&step))
      return child_fail(5, "connect");
    if (!link_.receive(&step, Millis{8000})) return child_fail(6, "the parent did not write");
    auto pages_as_expected = [&] {
      for (size_t page = 0; page < kPages; ++page)
        for (size_t i = 0; i < kPage; ++i)
          if (p[page * kPage + i] != expected(page, true)) return false;
      return true;
    };
    if (!pages_as_expected()) return child_fail(7, "registered pages");
    if (ibv_dereg_mr(mr) != 0) return child_fail(8, "deregister");
    if (!pages_as_expected()) return child_fail(9, "deregistered pages");
    std::memset(p, 0x99, kSize);  // ordinary memory again
    return p[kSize - 1] == 0x99 ? 0 : child_fail(10, "write after deregistration");
  });
  ASSERT_TRUE(child.started());
  Endpoint peer;
  ASSERT_NO_FATAL_FAILURE(ConnectToChild(nullptr, RcParams{}, &peer));
  ASSERT_EQ(peer.length, kSize);
  Buffer local = NewBuffer(kSize, kRemoteAccess, 0xee);
  ASSERT_EQ(
      post_send(qp_, rdma_wr(1, IBV_WR_RDMA_READ, peer.addr, peer.rkey), {local.sge(0, kSize)}), 0);
  ASSERT_TRUE(completed(poll_one(cq_), 1));
  for (size_t page = 0; page < kPages; ++page)
    EXPECT_TRUE(local.all(expected(page, false), page * kPage, kPage)) << "page " << page;
  local.fill(0x5a);
  ASSERT_EQ(
      post_send(qp_, rdma_wr(2, IBV_WR_RDMA_WRITE, peer.addr + kPeerWrites * kPage, peer.rkey),
                {local.sge(0, kPage)}),
      0);
  ASSERT_TRUE(completed(poll_one(cq_), 2));
  ASSERT_TRUE(link_.send(uint8_t{1}));
  EXPECT_TRUE(exited_with(child.Wait(), 0));
}

// Deregistered memory is ordinary memory again: a child forked afterwards gets a private
// copy, so neither process sees the other's writes.
TEST_F(MultiProcessTest, MemoryDeregisteredBeforeForkIsCopiedNotShared) {
  constexpr size_t kSize = 8192;
  Buffer buffer = NewBuffer(kSize, kRemoteAccess, 0x11);
  buffer.mr.reset();  // deregistered
  Child child(link_, [&buffer] {
    if (!buffer.all(0x11)) return child_fail(2, "inherited contents");
    buffer.fill(0x22);  // must not reach the parent
    return 0;
  });
  ASSERT_TRUE(child.started());
  EXPECT_TRUE(exited_with(child.Wait(), 0));
  EXPECT_TRUE(buffer.all(0x11)) << "the child's write reached the parent's memory";
}

// Megabytes through several scatter/gather entries of odd sizes, both ways.
TEST_F(MultiProcessTest, LargeScatterGatherTransfersKeepTheData) {
  constexpr size_t kSize = 6 * 1024 * 1024;
  Child child(link_, [this] {
    ChildVerbs v;
    if (!open_child_verbs(v, kSize, 0)) return child_fail(2, "open");
    Endpoint parent;
    if (!child_connect(link_, v, &parent)) return child_fail(3, "connect");
    uint8_t done = 0;
    link_.receive(&done, Millis{8000});
    return 0;
  });
  ASSERT_TRUE(child.started());
  Endpoint peer;
  ASSERT_NO_FATAL_FAILURE(ConnectToChild(nullptr, RcParams{}, &peer));
  ASSERT_EQ(peer.length, kSize);
  Buffer out = NewBuffer(kSize);
  Buffer in = NewBuffer(kSize, kRemoteAccess, 0);
  uint32_t x = 12345;
  for (size_t i = 0; i < kSize; ++i) {
    x = x * 1103515245u + 12345u;
    out.data()[i] = static_cast<uint8_t>(x >> 16);
  }
  // Gather 1 MiB + 7, 3 MiB - 7 + 4095 and the rest; scatter back over other boundaries.
  const uint32_t a = (1u << 20) + 7, b = (3u << 20) - 7 + 4095;
  const uint32_t c = static_cast<uint32_t>(kSize) - a - b;
  ASSERT_EQ(post_send(qp_, rdma_wr(1, IBV_WR_RDMA_WRITE, peer.addr, peer.rkey),
                      {out.sge(0, a), out.sge(a, b), out.sge(a + b, c)}),
            0);
  EXPECT_TRUE(completed(poll_one(cq_), 1));
  const uint32_t d = 4097, e = (2u << 20) + 1;
  const uint32_t f = static_cast<uint32_t>(kSize) - d - e;
  ASSERT_EQ(post_send(qp_, rdma_wr(2, IBV_WR_RDMA_READ, peer.addr, peer.rkey),
                      {in.sge(0, d), in.sge(d, e), in.sge(d + e, f)}),
            0);
  const ibv_wc wc = poll_one(cq_);
  EXPECT_TRUE(completed(wc, 2));
  EXPECT_EQ(wc.byte_len, kSize);
  EXPECT_EQ(std::memcmp(in.data(), out.data(), kSize), 0);
  ASSERT_TRUE(link_.send(uint8_t{1}));
  EXPECT_TRUE(exited_with(child.Wait(), 0));
}

// The receive completion is pushed into the child's CQ by the parent's process, which must
// also wake the child's completion channel.
TEST_F(MultiProcessTest, SendWakesThePeersCompletionChannel) {
  constexpr uint32_t kLength = 100;
  Child child(link_, [this] {
    ChildVerbs v;
    if (!open_child_verbs(v, 4096, 0, /*with_channel=*/true)) return child_fail(2, "open");
    Endpoint parent;
    if (!child_connect(link_, v, &parent)) return child_fail(3, "connect");
    if (ibv_req_notify_cq(v.cq, 0) != 0) return child_fail(4, "arm");
    const ibv_sge sge{v.buffer.addr(), static_cast<uint32_t>(v.buffer.size), v.mr->lkey};
    if (post_recv(v.qp, 77, {sge}) != 0) return child_fail(5, "post_recv");
    if (!wait_readable(v.channel->fd, Millis{5000})) return child_fail(6, "not woken");
    ibv_cq* cq = nullptr;
    void* cq_context = nullptr;
    if (ibv_get_cq_event(v.channel, &cq, &cq_context) != 0 || cq != v.cq)
      return child_fail(7, "ibv_get_cq_event");
    ibv_ack_cq_events(cq, 1);
    ibv_wc wc{};
    if (!poll_wc(v.cq, Millis{1000}, &wc)) return child_fail(8, "woken without a completion");
    const uint32_t report[3] = {wc.status, wc.byte_len, v.buffer.all(0x4d, 0, kLength) ? 1u : 0u};
    return link_.send(report) ? 0 : child_fail(9, "pipe");
  });
  ASSERT_TRUE(child.started());
  Endpoint peer;
  ASSERT_NO_FATAL_FAILURE(ConnectToChild(nullptr, RcParams{}, &peer));
  Buffer src = NewBuffer(4096, kRemoteAccess, 0x4d);
  ASSERT_EQ(post_send(qp_, send_wr(1), {src.sge(0, kLength)}), 0);
  EXPECT_TRUE(completed(poll_one(cq_), 1));

  uint32_t report[3] = {};
  ASSERT_TRUE(link_.receive(&report)) << "no report from the child";
  EXPECT_EQ(report[0], static_cast<uint32_t>(IBV_WC_SUCCESS));
  EXPECT_EQ(report[1], kLength);
  EXPECT_EQ(report[2], 1u) << "payload";
  EXPECT_TRUE(exited_with(child.Wait(), 0));
}

// The child's SENDs complete into this process's CQ, written by the child itself. A resize
// that moves the ring (past its room) keeps the completions waiting in it, and the child's
// next SENDs land in the new ring.
TEST_F(MultiProcessTest, APeerCompletesIntoARingThatMovedOnResize) {
  constexpr uint32_t kLength = 64;
  Child child(link_, [this] {
    ChildVerbs v;
    if (!open_child_verbs(v, 4096, 0x5e)) return child_fail(2, "open");
    Endpoint parent;
    if (!child_connect(link_, v, &parent)) return child_fail(3, "connect");
    const ibv_sge sge{v.buffer.addr(), kLength, v.mr->lkey};
    for (uint64_t round = 0; round < 2; ++round) {
      uint8_t go = 0;
      if (!link_.receive(&go)) return child_fail(4, "no go");
      for (uint64_t id = 1; id <= 3; ++id)
        if (post_send(v.qp, send_wr(id), {sge}) != 0) return child_fail(5, "post_send");
      for (int i = 0; i < 3; ++i) {
        ibv_wc wc{};
        if (!poll_wc(v.cq, Millis{5000}, &wc) || wc.status != IBV_WC_SUCCESS)
          return child_fail(6, "send completion");
      }
      if (!link_.send(kReady)) return child_fail(7, "pipe");
    }
    return 0;
  });
  ASSERT_TRUE(child.started());
  Endpoint peer;
  ASSERT_NO_FATAL_FAILURE(ConnectToChild(nullptr, RcParams{}, &peer));
  Buffer dst = NewBuffer(6 * kLength);
  for (uint64_t id = 1; id <= 6; ++id)
    ASSERT_EQ(post_recv(qp_, id, {dst.sge((id - 1) * kLength, kLength)}), 0);
  uint8_t sent = 0;
  ASSERT_TRUE(link_.send(kReady));
  ASSERT_TRUE(link_.receive(&sent)) << "the child's first SENDs";
  ASSERT_EQ(ibv_resize_cq(cq_, cq_->cqe * 4), 0);
  ASSERT_TRUE(link_.send(kReady));
  ASSERT_TRUE(link_.receive(&sent)) << "the child's second SENDs";
  const std::vector<ibv_wc> wcs = poll_n(cq_, 6);
  ASSERT_EQ(wcs.size(), 6u);
  for (uint64_t i = 0; i < 6; ++i) {
    EXPECT_TRUE(completed(wcs[i], i + 1));
    EXPECT_EQ(wcs[i].byte_len, kLength);
  }
  EXPECT_TRUE(dst.all(0x5e, 0, 6 * kLength)) << "payloads";
  EXPECT_TRUE(no_completion(cq_, Millis{0}));
  EXPECT_TRUE(exited_with(child.Wait(), 0));
}

TEST_F(MultiProcessTest, WritingToAKilledPeerExceedsRetriesAndFlushes) {
  Child child(link_, [this] {
    ChildVerbs v;
    if (!open_child_verbs(v, 4096, 0)) return child_fail(2, "open");
    Endpoint parent;
    if (!child_connect(link_, v, &parent)) return child_fail(3, "connect");
    uint8_t never = 0;
    link_.receive(&never, Millis{9000});  // until killed
    return child_fail(4, "not killed");
  });
  ASSERT_TRUE(child.started());
  RcParams params;
  params.timeout = 10;  // 4.096 us << 10 = 4 ms
  params.retry_cnt = 1;
  Endpoint peer;
  ASSERT_NO_FATAL_FAILURE(ConnectToChild(nullptr, params, &peer));
  Buffer local = NewBuffer(4096, kRemoteAccess, 0x33);

  ASSERT_EQ(post_send(qp_, rdma_wr(1, IBV_WR_RDMA_WRITE, peer.addr, peer.rkey), {local.sge(0, 64)}),
            0);
  EXPECT_TRUE(completed(poll_one(cq_), 1)) << "the connection works while the child lives";

  const int status = child.Kill();
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  const auto start = Clock::now();
  ASSERT_EQ(post_send(qp_, rdma_wr(2, IBV_WR_RDMA_WRITE, peer.addr, peer.rkey), {local.sge(0, 64)}),
            0);
  EXPECT_TRUE(completed(poll_one(cq_), 2, IBV_WC_RETRY_EXC_ERR));
  EXPECT_LT(Clock::now() - start, Millis{1000}) << "timeout 10 with retry_cnt 1 is ~8 ms";
  EXPECT_EQ(qp_state(qp_), IBV_QPS_ERR);
  ASSERT_EQ(post_send(qp_, rdma_wr(3, IBV_WR_RDMA_WRITE, peer.addr, peer.rkey), {local.sge(0, 64)}),
            0);
  EXPECT_TRUE(completed(poll_one(cq_), 3, IBV_WC_WR_FLUSH_ERR));

  // This process carries on: a new loopback connection works.
  ibv_qp* a = NewQp(IBV_QPT_RC, cq_, cq_);
  ibv_qp* b = NewQp(IBV_QPT_RC, cq_, cq_);
  ASSERT_TRUE(a && b);
  ASSERT_EQ(rc_connect(a, b->qp_num, gid0(), RcParams{}), 0);
  ASSERT_EQ(rc_connect(b, a->qp_num, gid0(), RcParams{}), 0);
  ASSERT_EQ(post_send(a, rdma_wr(4, IBV_WR_RDMA_WRITE, local.addr(2048), local.rkey()),
                      {local.sge(0, 64)}),
            0);
  EXPECT_TRUE(completed(poll_one(cq_), 4));
}

// A datagram to the UD QP of a process that died is lost at once, like one to nowhere: the
// sender's later datagrams do not wait behind it (a dead RC peer is retried instead).
TEST_F(MultiProcessTest, DatagramsToAKilledProcessAreLostWithoutHoldingUpLaterOnes) {
  constexpr uint32_t kQkey = 0x11111111;
  Child child(link_, [this] {
    ChildVerbs v;
    if (!open_child_verbs(v, 4096, 0)) return child_fail(2, "open");
    ibv_qp* ud = create_qp(v.pd, IBV_QPT_UD, v.cq, v.cq);
    if (!ud || ud_to_rts(ud, kQkey) != 0) return child_fail(3, "ud qp");
    const uint32_t qpn = ud->qp_num;
    if (!link_.send(qpn)) return child_fail(4, "send qpn");
    uint8_t never = 0;
    link_.receive(&never, Millis{9000});  // until killed
    return child_fail(5, "not killed");
  });
  ASSERT_TRUE(child.started());
  uint32_t dead_qpn = 0;
  ASSERT_TRUE(link_.receive(&dead_qpn));
  const int status = child.Kill();
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  ibv_cq* cq_b = NewCq();
  ibv_qp* a = NewQp(IBV_QPT_UD, cq_, cq_);
  ibv_qp* b = NewQp(IBV_QPT_UD, cq_b, cq_b);
  ASSERT_TRUE(cq_b && a && b);
  ASSERT_EQ(ud_to_rts(a, kQkey), 0);
  ASSERT_EQ(ud_to_rts(b, kQkey), 0);
  AhPtr ah = NewAh(gid0());
  ASSERT_NE(ah, nullptr);
  Buffer src = NewBuffer(64, kRemoteAccess, 0x5a);
  Buffer dst = NewBuffer(40 + 64, kRemoteAccess, 0);
  ASSERT_EQ(post_recv(b, 100, {dst.sge()}), 0);
  const auto start = Clock::now();
  for (uint64_t i = 1; i <= 8; ++i)
    ASSERT_EQ(post_send(a, ud_wr(i, ah.get(), dead_qpn, kQkey), {src.sge(0, 64)}), 0);
  ASSERT_EQ(post_send(a, ud_wr(9, ah.get(), b->qp_num, kQkey), {src.sge(0, 64)}), 0);
  for (uint64_t i = 1; i <= 9; ++i) EXPECT_TRUE(completed(poll_one(cq_), i));
  EXPECT_TRUE(completed(poll_one(cq_b), 100));
  EXPECT_LT(Clock::now() - start, Millis{500}) << "a lost datagram is not retried";
  EXPECT_TRUE(dst.all(0x5a, 40, 64));
}

TEST_F(MultiProcessTest, DeregisteringWhileThePeerWritesEndsAllAccess) {
  constexpr size_t kSize = 64 * 1024;
  Child child(link_, [this] {
    ChildVerbs v;
    if (!open_child_verbs(v, kSize, 0xab)) return child_fail(2, "open");
    Endpoint parent;
    if (!child_connect(link_, v, &parent)) return child_fail(3, "connect");
    // Write into the parent's region until that fails.
    const auto deadline = Clock::now() + Millis{5000};
    uint32_t status = IBV_WC_SUCCESS;
    uint64_t writes = 0;
    const ibv_sge sge{v.buffer.addr(), static_cast<uint32_t>(kSize), v.mr->lkey};
    while (status == IBV_WC_SUCCESS && Clock::now() < deadline) {
      ibv_send_wr wr = rdma_wr(writes, IBV_WR_RDMA_WRITE, parent.addr, parent.rkey);
      if (post_send(v.qp, wr, {sge}) != 0) return child_fail(4, "post");
      ibv_wc wc{};
      if (!poll_wc(v.cq, Millis{3000}, &wc)) return child_fail(5, "no completion");
      status = wc.status;
      if (status == IBV_WC_SUCCESS && ++writes == 1 && !link_.send(uint8_t{'S'}))
        return child_fail(6, "pipe");
    }
    return link_.send(status) && link_.send(writes) ? 0 : child_fail(7, "pipe");
  });
  ASSERT_TRUE(child.started());
  Buffer target = NewBuffer(kSize, kRemoteAccess, 0);
  Endpoint peer;
  ASSERT_NO_FATAL_FAILURE(ConnectToChild(&target, RcParams{}, &peer));

  uint8_t started = 0;
  ASSERT_TRUE(link_.receive(&started)) << "the child did not start writing";
  std::this_thread::sleep_for(Millis{5});  // let writes run
  ASSERT_EQ(ibv_dereg_mr(target.mr.release()), 0);
  // From here on the region must not change.
  target.fill(0x5a);
  std::this_thread::sleep_for(kQuiet);
  EXPECT_TRUE(target.all(0x5a)) << "memory written after ibv_dereg_mr returned";

  uint32_t status = 0;
  uint64_t writes = 0;
  ASSERT_TRUE(link_.receive(&status));
  ASSERT_TRUE(link_.receive(&writes));
  EXPECT_EQ(status, static_cast<uint32_t>(IBV_WC_REM_ACCESS_ERR))
      << ibv_wc_status_str(static_cast<ibv_wc_status>(status));
  EXPECT_GE(writes, 1u);
  EXPECT_TRUE(exited_with(child.Wait(), 0));
  EXPECT_TRUE(target.all(0x5a));
  // The parent's QP was the responder of the failed write.
  EXPECT_EQ(qp_state(qp_), IBV_QPS_ERR);
  const std::optional<ibv_async_event> event = next_async_event(ctx(), kTimeout);
  ASSERT_TRUE(event);
  EXPECT_EQ(event->event_type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(event->element.qp, qp_);
}

// Fetch-and-adds from four processes at once on one word of a fifth: every one lands (no
// lost update), and each process sees the word only grow between its own adds.
void MultiProcessTest::FourProcessesAddToOneWord(size_t region_bytes, uint64_t adds) {
  constexpr int kProcesses = 4;
  constexpr uint32_t kBatch = 32;  // requests in flight per process
  std::array<Link, kProcesses> links;
  std::vector<std::unique_ptr<Child>> children;
  for (Link& link : links) {
    ASSERT_TRUE(link.ok());
    children.push_back(std::make_unique<Child>(link, [&link, adds] {
      ChildVerbs v;
      if (!open_child_verbs(v, kBatch * sizeof(uint64_t), 0)) return child_fail(2, "open");
      Endpoint parent;
      if (!child_connect(link, v, &parent)) return child_fail(3, "connect");
      const auto* results = reinterpret_cast<const uint64_t*>(v.buffer.data());
      uint64_t last = 0;
      for (uint64_t done = 0; done < adds;) {
        const uint32_t batch = static_cast<uint32_t>(std::min<uint64_t>(kBatch, adds - done));
        for (uint32_t i = 0; i < batch; ++i) {
          const ibv_sge sge{v.buffer.addr(i * sizeof(uint64_t)), sizeof(uint64_t), v.mr->lkey};
          const ibv_send_wr wr =
              atomic_wr(done + i, IBV_WR_ATOMIC_FETCH_AND_ADD, parent.addr, parent.rkey, 1);
          if (post_send(v.qp, wr, {sge}) != 0) return child_fail(4, "post");
        }
        for (uint32_t i = 0; i < batch; ++i) {
          ibv_wc wc{};
          if (!poll_wc(v.cq, Millis{3000}, &wc)) return child_fail(5, "no completion");
          if (wc.status != IBV_WC_SUCCESS) return child_fail(6, "failed add");
        }
        for (uint32_t i = 0; i < batch; ++i, ++done) {
          if (done > 0 && results[i] <= last) return child_fail(7, "the word went back");
          last = results[i];
        }
      }
      return 0;
    }));
    ASSERT_TRUE(children.back()->started());
  }
  // Forked first (see fork_child.hpp), then one parent QP per child, all on one word.
  Buffer word = NewBuffer(region_bytes, kRemoteAccess, 0);
  for (Link& link : links) {
    ibv_qp* qp = NewQp(IBV_QPT_RC, cq_, cq_);
    ASSERT_NE(qp, nullptr);
    Endpoint child;
    ASSERT_TRUE(link.send(Endpoint{qp->qp_num, word.rkey(), word.addr(), word.size}));
    ASSERT_TRUE(link.receive(&child));
    ASSERT_EQ(rc_connect(qp, child.qpn, gid0(), RcParams{}), 0);
    ASSERT_TRUE(link.send(kReady));
    uint8_t ready = 0;
    ASSERT_TRUE(link.receive(&ready));
  }
  for (auto& child : children) EXPECT_TRUE(exited_with(child->Wait(Millis{30000}), 0));
  uint64_t total = 0;
  std::memcpy(&total, word.data(), sizeof total);
  EXPECT_EQ(total, kProcesses * adds);
}

// Whole pages are shared with the peers: each add is one CPU atomic on the mapped word.
TEST_F(MultiProcessTest, FetchAndAddsFromFourProcessesOnASharedPageLoseNoUpdate) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr uint64_t kAdds = 100'000;  // per process; instrumented children are slower
#else
  constexpr uint64_t kAdds = 1'000'000;
#endif
  FourProcessesAddToOneWord(4096, kAdds);
}

// An 8-byte region is not on shared pages: peers reach the word with process_vm_* under the
// host's lock for it.
TEST_F(MultiProcessTest, FetchAndAddsFromFourProcessesOnAPrivateWordLoseNoUpdate) {
  FourProcessesAddToOneWord(sizeof(uint64_t), 5'000);
}

}  // namespace
}  // namespace softrdma_test

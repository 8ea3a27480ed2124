// Shared helpers of the softrdma verbs tests: RAII owners of verbs objects, QP bring-up,
// posting, and polling that is always bounded in time.
//
// The tests are built against the system's verbs headers and library; at run time
// LD_LIBRARY_PATH selects softrdma's drop-in libibverbs.so.1, which VerbsTest checks.
//
// The plain functions (no gtest macros) are also usable in a fork()ed child; the fixtures
// use gtest assertions.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace softrdma_test {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

/// How long anything that must happen may take before the test fails.
inline constexpr Millis kTimeout{5000};
/// How long the tests watch for something that must not happen.
inline constexpr Millis kQuiet{50};

/// Built with ASan or TSan: the library runs several times slower and its threads' timing
/// changes, so a count of how often they wake measures the instrumentation, not the library.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kInstrumented = true;
#else
inline constexpr bool kInstrumented = false;
#endif

inline constexpr const char* kDeviceName = "softrdma0";
inline constexpr uint8_t kPort = 1;

inline constexpr int kRemoteAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

/// wr_id of the placeholder completion poll_one returns when nothing arrived in time.
inline constexpr uint64_t kNoCompletion = ~uint64_t{0};

// ---------------------------------------------------------------------------------------------
// RAII owners. Destroying a verbs object is checked: a failure there is a test failure.

struct CloseDevice {
  void operator()(ibv_context* p) const { EXPECT_EQ(ibv_close_device(p), 0); }
};
struct DeallocPd {
  void operator()(ibv_pd* p) const { EXPECT_EQ(ibv_dealloc_pd(p), 0); }
};
struct DeregMr {
  void operator()(ibv_mr* p) const { EXPECT_EQ(ibv_dereg_mr(p), 0); }
};
struct DestroyCq {
  void operator()(ibv_cq* p) const { EXPECT_EQ(ibv_destroy_cq(p), 0); }
};
struct DestroyChannel {
  void operator()(ibv_comp_channel* p) const { EXPECT_EQ(ibv_destroy_comp_channel(p), 0); }
};
struct DestroyQp {
  void operator()(ibv_qp* p) const { EXPECT_EQ(ibv_destroy_qp(p), 0); }
};
struct DestroySrq {
  void operator()(ibv_srq* p) const { EXPECT_EQ(ibv_destroy_srq(p), 0); }
};
struct DestroyAh {
  void operator()(ibv_ah* p) const { EXPECT_EQ(ibv_destroy_ah(p), 0); }
};
struct FreeMemory {
  void operator()(void* p) const { std::free(p); }
};

using ContextPtr = std::unique_ptr<ibv_context, CloseDevice>;
using PdPtr = std::unique_ptr<ibv_pd, DeallocPd>;
using MrPtr = std::unique_ptr<ibv_mr, DeregMr>;
using CqPtr = std::unique_ptr<ibv_cq, DestroyCq>;
using ChannelPtr = std::unique_ptr<ibv_comp_channel, DestroyChannel>;
using QpPtr = std::unique_ptr<ibv_qp, DestroyQp>;
using SrqPtr = std::unique_ptr<ibv_srq, DestroySrq>;
using AhPtr = std::unique_ptr<ibv_ah, DestroyAh>;

/// Page-aligned memory, optionally registered. Accessors stay safe when registration failed
/// (keys read as 0) so that a failed test reports instead of crashing.
struct Buffer {
  std::unique_ptr<uint8_t, FreeMemory> memory;
  size_t size = 0;
  MrPtr mr;

  uint8_t* data() const { return memory.get(); }
  uint64_t addr(size_t offset = 0) const {
    return reinterpret_cast<uintptr_t>(memory.get()) + offset;
  }
  uint32_t lkey() const { return mr ? mr->lkey : 0; }
  uint32_t rkey() const { return mr ? mr->rkey : 0; }
  ibv_sge sge(size_t offset, uint32_t length) const {
    return ibv_sge{addr(offset), length, lkey()};
  }
  ibv_sge sge() const { return sge(0, static_cast<uint32_t>(size)); }
  void fill(uint8_t value) const { std::memset(data(), value, size); }
  /// True if every byte in [offset, offset + length) equals `value`.
  bool all(uint8_t value, size_t offset = 0, size_t length = SIZE_MAX) const {
    const size_t end = std::min(size, length == SIZE_MAX ? size : offset + length);
    return std::all_of(data() + offset, data() + end, [value](uint8_t b) { return b == value; });
  }
};

inline Buffer allocate_buffer(size_t size, uint8_t fill = 0) {
  Buffer b;
  const size_t rounded = (std::max<size_t>(size, 1) + 4095) & ~size_t{4095};
  b.memory.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, rounded)));
  b.size = size;
  if (b.memory) std::memset(b.memory.get(), fill, rounded);
  return b;
}

// ---------------------------------------------------------------------------------------------
// Plain helpers: QP creation and bring-up, posting, polling. They return errno values (0 on
// success) or nullptr, and never use gtest, so a fork()ed child may use them too.

struct QpCaps {
  uint32_t send_wr = 64;
  uint32_t recv_wr = 64;
  uint32_t send_sge = 4;
  uint32_t recv_sge = 4;
  uint32_t inline_data = 64;
};

/// What ibv_create_qp (or rdma_create_qp, whose null CQs it makes itself) is asked for.
inline ibv_qp_init_attr qp_init_attr(ibv_qp_type type, ibv_cq* send_cq, ibv_cq* recv_cq,
                                     const QpCaps& caps = {}, bool sq_sig_all = true,
                                     ibv_srq* srq = nullptr) {
  ibv_qp_init_attr init{};
  init.send_cq = send_cq;
  init.recv_cq = recv_cq;
  init.srq = srq;
  init.qp_type = type;
  init.sq_sig_all = sq_sig_all ? 1 : 0;
  init.cap.max_send_wr = caps.send_wr;
  init.cap.max_recv_wr = srq ? 0 : caps.recv_wr;
  init.cap.max_send_sge = caps.send_sge;
  init.cap.max_recv_sge = srq ? 0 : caps.recv_sge;
  init.cap.max_inline_data = caps.inline_data;
  return init;
}

inline ibv_qp* create_qp(ibv_pd* pd, ibv_qp_type type, ibv_cq* send_cq, ibv_cq* recv_cq,
                         const QpCaps& caps = {}, bool sq_sig_all = true, ibv_srq* srq = nullptr) {
  ibv_qp_init_attr init = qp_init_attr(type, send_cq, recv_cq, caps, sq_sig_all, srq);
  return ibv_create_qp(pd, &init);
}

/// Connection parameters of one RC QP.
struct RcParams {
  int access = kRemoteAccess;  // qp_access_flags
  uint8_t timeout = 14;        // 4.096 us << 14 = 67 ms
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;      // 7: retry forever
  uint8_t min_rnr_timer = 1;  // 10 us: RNR retries are quick
  uint32_t psn = 0;
  ibv_mtu mtu = IBV_MTU_4096;
  uint8_t max_rd_atomic = 1;
};

inline int rc_to_init(ibv_qp* qp, int access) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = kPort;
  a.qp_access_flags = static_cast<unsigned>(access);
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

/// An address vector towards `dgid` from GID index 0 (RoCE: always with a GRH).
inline ibv_ah_attr global_ah_attr(const ibv_gid& dgid) {
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.port_num = kPort;
  ah.grh.dgid = dgid;
  ah.grh.sgid_index = 0;
  ah.grh.hop_limit = 64;
  return ah;
}

inline int rc_to_rtr(ibv_qp* qp, uint32_t dest_qpn, const ibv_gid& dgid, const RcParams& p) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = p.mtu;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = p.psn;
  a.max_dest_rd_atomic = p.max_rd_atomic;
  a.min_rnr_timer = p.min_rnr_timer;
  a.ah_attr = global_ah_attr(dgid);
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

inline int rc_to_rts(ibv_qp* qp, const RcParams& p) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = p.psn;
  a.timeout = p.timeout;
  a.retry_cnt = p.retry_cnt;
  a.rnr_retry = p.rnr_retry;
  a.max_rd_atomic = p.max_rd_atomic;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

/// RESET -> INIT -> RTR -> RTS towards QP `dest_qpn` at `dgid`.
inline int rc_connect(ibv_qp* qp, uint32_t dest_qpn, const ibv_gid& dgid, const RcParams& p) {
  if (int err = rc_to_init(qp, p.access)) return err;
  if (int err = rc_to_rtr(qp, dest_qpn, dgid, p)) return err;
  return rc_to_rts(qp, p);
}

/// RESET -> INIT -> RTR -> RTS towards QP `dest_qpn` at `dgid`, with exactly the
/// attributes UC requires.
inline int uc_connect(ibv_qp* qp, uint32_t dest_qpn, const ibv_gid& dgid) {
  if (int err = rc_to_init(qp, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) return err;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = 0;
  a.ah_attr = global_ah_attr(dgid);
  if (int err = ibv_modify_qp(
          qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN))
    return err;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

/// RESET -> INIT -> RTR -> RTS for a UD QP.
inline int ud_to_rts(ibv_qp* qp, uint32_t qkey) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = kPort;
  a.qkey = qkey;
  if (int err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
    return err;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  if (int err = ibv_modify_qp(qp, &a, IBV_QP_STATE)) return err;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

inline ibv_qp_state qp_state(ibv_qp* qp) {
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  if (ibv_query_qp(qp, &a, IBV_QP_STATE, &init) != 0) return IBV_QPS_UNKNOWN;
  return a.qp_state;
}

/// Names each case of a parameterised test by its `name` member (INSTANTIATE_TEST_SUITE_P's
/// name generator).
struct CaseName {
  template <class Case>
  std::string operator()(const ::testing::TestParamInfo<Case>& info) const {
    return std::string(info.param.name);
  }
};

inline ibv_send_wr send_wr(uint64_t wr_id, ibv_wr_opcode opcode = IBV_WR_SEND,
                           unsigned flags = IBV_SEND_SIGNALED) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = opcode;
  wr.send_flags = flags;
  return wr;
}

inline ibv_send_wr rdma_wr(uint64_t wr_id, ibv_wr_opcode opcode, uint64_t remote_addr,
                           uint32_t rkey, unsigned flags = IBV_SEND_SIGNALED) {
  ibv_send_wr wr = send_wr(wr_id, opcode, flags);
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  return wr;
}

inline ibv_send_wr atomic_wr(uint64_t wr_id, ibv_wr_opcode opcode, uint64_t remote_addr,
                             uint32_t rkey, uint64_t compare_add, uint64_t swap = 0) {
  ibv_send_wr wr = send_wr(wr_id, opcode);
  wr.wr.atomic.remote_addr = remote_addr;
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.compare_add = compare_add;
  wr.wr.atomic.swap = swap;
  return wr;
}

inline ibv_send_wr ud_wr(uint64_t wr_id, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  ibv_send_wr wr = send_wr(wr_id);
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = remote_qpn;
  wr.wr.ud.remote_qkey = remote_qkey;
  return wr;
}

/// Posts one send work request with the given scatter/gather list; returns 0 or an errno.
inline int post_send(ibv_qp* qp, ibv_send_wr wr, std::initializer_list<ibv_sge> sges = {}) {
  std::vector<ibv_sge> list(sges);
  wr.sg_list = list.empty() ? nullptr : list.data();
  wr.num_sge = static_cast<int>(list.size());
  wr.next = nullptr;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

inline int post_recv(ibv_qp* qp, uint64_t wr_id, std::initializer_list<ibv_sge> sges = {}) {
  std::vector<ibv_sge> list(sges);
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = list.empty() ? nullptr : list.data();
  wr.num_sge = static_cast<int>(list.size());
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad);
}

inline int post_srq_recv(ibv_srq* srq, uint64_t wr_id, std::initializer_list<ibv_sge> sges = {}) {
  std::vector<ibv_sge> list(sges);
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = list.empty() ? nullptr : list.data();
  wr.num_sge = static_cast<int>(list.size());
  ibv_recv_wr* bad = nullptr;
  return ibv_post_srq_recv(srq, &wr, &bad);
}

/// Polls `cq` until one completion arrives or `timeout` passes. False on timeout.
inline bool poll_wc(ibv_cq* cq, Millis timeout, ibv_wc* wc) {
  const auto deadline = Clock::now() + timeout;
  for (int i = 0;; ++i) {
    const int n = ibv_poll_cq(cq, 1, wc);
    if (n == 1) return true;
    if (n < 0 || Clock::now() > deadline) return false;
    // Leave the CPU to softrdma's progress thread (retries run there).
    if (i > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

/// True if `fd` becomes readable within `timeout`.
inline bool wait_readable(int fd, Millis timeout) {
  pollfd p{fd, POLLIN, 0};
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    const int r = poll(&p, 1, static_cast<int>(std::max<Millis::rep>(left.count(), 0)));
    if (r > 0) return (p.revents & POLLIN) != 0;
    if (r == 0 || errno != EINTR || Clock::now() > deadline) return false;
  }
}

/// Writes all of `data` to a pipe or socket (tests' parent/child exchanges).
inline bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

/// CPU time this process has used, user and system, in seconds.
inline double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/// Reads exactly `n` bytes within `timeout`; false on timeout, error or a peer gone.
inline bool read_all(int fd, void* data, size_t n, Millis timeout) {
  auto* p = static_cast<uint8_t*>(data);
  const auto deadline = Clock::now() + timeout;
  while (n > 0) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    if (left.count() < 0 || !wait_readable(fd, left)) return false;
    const ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

/// The next asynchronous event of `ctx` (copied, then acknowledged), or nothing if none
/// arrives within `timeout`.
inline std::optional<ibv_async_event> next_async_event(ibv_context* ctx, Millis timeout) {
  if (!wait_readable(ctx->async_fd, timeout)) return std::nullopt;
  ibv_async_event event{};
  if (ibv_get_async_event(ctx, &event) != 0) return std::nullopt;
  ibv_async_event copy = event;
  ibv_ack_async_event(&event);
  return copy;
}

// ---------------------------------------------------------------------------------------------
// gtest-aware helpers.

/// One completion from `cq`; fails the test if none arrives within `timeout` (then returns a
/// placeholder with wr_id kNoCompletion and status IBV_WC_GENERAL_ERR).
inline ibv_wc poll_one(ibv_cq* cq, Millis timeout = kTimeout) {
  ibv_wc wc{};
  if (!poll_wc(cq, timeout, &wc)) {
    ADD_FAILURE() << "no completion within " << timeout.count() << " ms";
    wc = ibv_wc{};
    wc.wr_id = kNoCompletion;
    wc.status = IBV_WC_GENERAL_ERR;
  }
  return wc;
}

/// `n` completions from `cq`, in order; fails the test if they do not all arrive in time.
inline std::vector<ibv_wc> poll_n(ibv_cq* cq, size_t n, Millis timeout = kTimeout) {
  std::vector<ibv_wc> out;
  const auto deadline = Clock::now() + timeout;
  while (out.size() < n) {
    ibv_wc wc{};
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    if (!poll_wc(cq, std::max(left, Millis{0}), &wc)) {
      ADD_FAILURE() << "only " << out.size() << " of " << n << " completions within "
                    << timeout.count() << " ms";
      break;
    }
    out.push_back(wc);
  }
  return out;
}

/// Success if `cq` stays empty for `quiet`.
inline ::testing::AssertionResult no_completion(ibv_cq* cq, Millis quiet = kQuiet) {
  ibv_wc wc{};
  if (poll_wc(cq, quiet, &wc))
    return ::testing::AssertionFailure()
           << "unexpected completion wr_id=" << wc.wr_id << " status=" << wc.status << " ("
           << ibv_wc_status_str(wc.status) << ") opcode=" << wc.opcode;
  return ::testing::AssertionSuccess();
}

/// Checks a completion's status and wr_id, printing the status by name.
inline ::testing::AssertionResult completed(const ibv_wc& wc, uint64_t wr_id,
                                            ibv_wc_status status = IBV_WC_SUCCESS) {
  if (wc.wr_id == wr_id && wc.status == status) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "completion wr_id=" << wc.wr_id << " status=" << wc.status << " ("
         << ibv_wc_status_str(wc.status) << "), expected wr_id=" << wr_id << " status=" << status
         << " (" << ibv_wc_status_str(status) << ")";
}

/// Opens softrdma0: the first (and only) device when LD_LIBRARY_PATH selects softrdma.
class VerbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    ASSERT_NE(list, nullptr) << "ibv_get_device_list: " << std::strerror(errno);
    if (n < 1) {
      ibv_free_device_list(list);
      FAIL() << "no RDMA device: is LD_LIBRARY_PATH set to softrdma's lib directory?";
    }
    const std::string name = ibv_get_device_name(list[0]);
    if (name == kDeviceName) ctx_.reset(ibv_open_device(list[0]));
    ibv_free_device_list(list);
    ASSERT_EQ(name, kDeviceName) << "not running on softrdma";
    ASSERT_NE(ctx_, nullptr) << "ibv_open_device: " << std::strerror(errno);
    pd_.reset(ibv_alloc_pd(ctx_.get()));
    ASSERT_NE(pd_, nullptr) << "ibv_alloc_pd: " << std::strerror(errno);
    ASSERT_EQ(ibv_query_gid(ctx_.get(), kPort, 0, &gid0_), 0);
  }

  ibv_context* ctx() const { return ctx_.get(); }
  ibv_pd* pd() const { return pd_.get(); }

  /// A registered buffer (`fill` in every byte); a failed registration fails the test.
  Buffer NewBuffer(size_t size, int access = kRemoteAccess, uint8_t fill = 0) {
    Buffer b = allocate_buffer(size, fill);
    b.mr.reset(ibv_reg_mr(pd(), b.data(), size, access));
    if (!b.mr) ADD_FAILURE() << "ibv_reg_mr(" << size << "): " << std::strerror(errno);
    return b;
  }

  // Objects below are owned by the fixture and destroyed after the test body, QPs first.
  ibv_comp_channel* NewChannel() {
    channels_.emplace_back(ibv_create_comp_channel(ctx()));
    if (!channels_.back()) ADD_FAILURE() << "ibv_create_comp_channel: " << std::strerror(errno);
    return channels_.back().get();
  }
  ibv_cq* NewCq(int cqe = 256, ibv_comp_channel* channel = nullptr, void* cq_context = nullptr) {
    cqs_.emplace_back(ibv_create_cq(ctx(), cqe, cq_context, channel, 0));
    if (!cqs_.back()) ADD_FAILURE() << "ibv_create_cq(" << cqe << "): " << std::strerror(errno);
    return cqs_.back().get();
  }
  /// An extended CQ, or nullptr with errno (tests of its creation check both).
  ibv_cq_ex* NewCqEx(ibv_cq_init_attr_ex attr) {
    ibv_cq_ex* cq = ibv_create_cq_ex(ctx(), &attr);
    if (cq) cqs_.emplace_back(ibv_cq_ex_to_cq(cq));
    return cq;
  }
  ibv_srq* NewSrq(uint32_t max_wr, uint32_t max_sge = 4, uint32_t limit = 0) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = max_wr;
    init.attr.max_sge = max_sge;
    init.attr.srq_limit = limit;
    srqs_.emplace_back(ibv_create_srq(pd(), &init));
    if (!srqs_.back()) ADD_FAILURE() << "ibv_create_srq: " << std::strerror(errno);
    return srqs_.back().get();
  }
  ibv_qp* NewQp(ibv_qp_type type, ibv_cq* send_cq, ibv_cq* recv_cq, const QpCaps& caps = {},
                bool sq_sig_all = true, ibv_srq* srq = nullptr) {
    qps_.emplace_back(create_qp(pd(), type, send_cq, recv_cq, caps, sq_sig_all, srq));
    if (!qps_.back()) ADD_FAILURE() << "ibv_create_qp: " << std::strerror(errno);
    return qps_.back().get();
  }
  AhPtr NewAh(const ibv_gid& dgid) {
    ibv_ah_attr attr = global_ah_attr(dgid);
    AhPtr ah(ibv_create_ah(pd(), &attr));
    if (!ah) ADD_FAILURE() << "ibv_create_ah: " << std::strerror(errno);
    return ah;
  }

  /// Destroys a fixture-owned object now; returns what the destroy verb returned.
  int DestroyQpNow(ibv_qp* qp) { return destroy_now(qps_, qp, ibv_destroy_qp); }
  int DestroyCqNow(ibv_cq* cq) { return destroy_now(cqs_, cq, ibv_destroy_cq); }
  int DestroyChannelNow(ibv_comp_channel* ch) {
    return destroy_now(channels_, ch, ibv_destroy_comp_channel);
  }

  const ibv_gid& gid0() const { return gid0_; }

 private:
  template <typename Owners, typename T, typename Destroy>
  static int destroy_now(Owners& owners, T* object, Destroy destroy) {
    for (auto& owner : owners) {
      if (owner.get() != object) continue;
      const int rc = destroy(object);
      if (rc == 0) (void)owner.release();
      return rc;
    }
    ADD_FAILURE() << "not owned by the fixture";
    return -1;
  }

  ContextPtr ctx_;
  PdPtr pd_;
  ibv_gid gid0_{};
  std::vector<ChannelPtr> channels_;
  std::vector<CqPtr> cqs_;
  std::vector<SrqPtr> srqs_;
  std::vector<QpPtr> qps_;
};

/// Two RC QPs of this process connected to each other (loopback through GID index 0).
/// By convention `a` is the requester and `b` the responder.
struct RcPair {
  ibv_qp* a = nullptr;
  ibv_qp* b = nullptr;
  ibv_cq* cq_a = nullptr;  // a's send and receive CQ unless overridden
  ibv_cq* cq_b = nullptr;  // b's send and receive CQ unless overridden
};

struct PairOptions {
  QpCaps caps;
  bool sq_sig_all = true;
  RcParams a;
  RcParams b;
  ibv_srq* srq_b = nullptr;  // b receives from this SRQ
  // CQ overrides (null: the pair's own cq_a / cq_b).
  ibv_cq* a_send_cq = nullptr;
  ibv_cq* a_recv_cq = nullptr;
  ibv_cq* b_send_cq = nullptr;
  ibv_cq* b_recv_cq = nullptr;
};

class RcLoopbackTest : public VerbsTest {
 protected:
  /// Creates and connects a pair; use as ASSERT_NO_FATAL_FAILURE(MakePair(options, &pair)).
  void MakePair(const PairOptions& o, RcPair* out) {
    RcPair p;
    p.cq_a = NewCq();
    p.cq_b = NewCq();
    ASSERT_TRUE(p.cq_a && p.cq_b);
    p.a = NewQp(IBV_QPT_RC, o.a_send_cq ? o.a_send_cq : p.cq_a, o.a_recv_cq ? o.a_recv_cq : p.cq_a,
                o.caps, o.sq_sig_all);
    p.b = NewQp(IBV_QPT_RC, o.b_send_cq ? o.b_send_cq : p.cq_b, o.b_recv_cq ? o.b_recv_cq : p.cq_b,
                o.caps, o.sq_sig_all, o.srq_b);
    ASSERT_TRUE(p.a && p.b);
    ASSERT_EQ(rc_connect(p.a, p.b->qp_num, gid0(), o.a), 0);
    ASSERT_EQ(rc_connect(p.b, p.a->qp_num, gid0(), o.b), 0);
    *out = p;
  }
  /// The fixture's own pair `p_`.
  void ConnectPair(const PairOptions& o = {}) { MakePair(o, &p_); }

  RcPair p_;
};

/// Two UD QPs of this process, both at GID index 0, with one qkey.
struct UdPair {
  ibv_qp* a = nullptr;
  ibv_qp* b = nullptr;
  ibv_cq* cq_a = nullptr;
  ibv_cq* cq_b = nullptr;
};

class UdTest : public VerbsTest {
 protected:
  static constexpr uint32_t kQkey = 0x11111111;

  void MakeUdPair(UdPair* out, uint32_t qkey = kQkey) {
    UdPair p;
    p.cq_a = NewCq();
    p.cq_b = NewCq();
    ASSERT_TRUE(p.cq_a && p.cq_b);
    p.a = NewQp(IBV_QPT_UD, p.cq_a, p.cq_a);
    p.b = NewQp(IBV_QPT_UD, p.cq_b, p.cq_b);
    ASSERT_TRUE(p.a && p.b);
    ASSERT_EQ(ud_to_rts(p.a, qkey), 0);
    ASSERT_EQ(ud_to_rts(p.b, qkey), 0);
    *out = p;
  }
};

}  // namespace softrdma_test

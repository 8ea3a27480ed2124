// The coroutine data path: co_await on RDMA operations of a connected QP.
//
//   AsyncQueuePair qp(poller, queue_pair);
//   std::error_code ec = co_await qp.write(local, remote);
//
// Every operation's state lives in its awaiter, inside the coroutine frame; wr_id points at
// it. Operations are posted by the poller in batches (one doorbell per batch), only some are
// signalled (an RC completion retires every earlier work request), and a full send queue
// suspends the caller until room frees. Awaiters are resumed on the thread that polls. An
// AsyncQueuePair, its poller and its coroutines belong to one thread; only cancellation
// (std::stop_token) may come from another.
#pragma once

#include <arpa/inet.h>

#include <cstdint>
#include <cstring>
#include <system_error>

#include "rdmakit/buffer.hpp"
#include "rdmakit/operation.hpp"
#include "rdmakit/queue_pair.hpp"
#include "rdmakit/task.hpp"

namespace rdmakit {

class Poller;

/// What a receive delivered.
struct Received {
  /// Empty on success; the completion's status or Errc::canceled/timed_out.
  std::error_code error;
  /// Bytes received.
  uint32_t byte_len = 0;
  std::optional<uint32_t> imm;  ///< for SEND_WITH_IMM and RDMA_WRITE_WITH_IMM
};

/// What an atomic returned: the remote value before the operation.
struct AtomicResult {
  /// Empty on success; else why the atomic failed.
  std::error_code error;
  /// The remote value before the operation.
  uint64_t old_value = 0;
};

/// A connected QP driven by coroutines: each operation is an awaitable (see the top of
/// this header). Not copyable or movable: awaiters point at it.
class AsyncQueuePair {
 public:
  template <typename Op, typename Result>
  /// What the operations return: co_await it for the result. Its state is the operation's.
  class Awaiter : public Op {
   public:
    /// `fill` sets up the work request of this very object (its address is final: awaiters
    /// are neither copied nor moved).
    template <typename Fill>
    Awaiter(AsyncQueuePair* owner, const OpOptions& options, Fill&& fill) noexcept {
      this->qp = owner;
      this->timeout = options.timeout;
      this->stop = options.stop;
      owner->init(*this);
      fill(*this);
    }
    Awaiter(const Awaiter&) = delete;
    Awaiter& operator=(const Awaiter&) = delete;
    /// Always suspends: the operation completes through the poller.
    bool await_ready() const noexcept { return false; }
    /// Submits the operation (posted at once on an idle queue, else with the next batch).
    /// False (the coroutine goes on at once) when it already completed: see submit().
    bool await_suspend(std::coroutine_handle<> suspended) noexcept {
      this->waiter = suspended;
      return !this->qp->submit(this);
    }
    /// The operation's outcome.
    Result await_resume() noexcept;
  };
  /// Awaiter of a send-queue operation: its error code (empty on success).
  using SendAwaiter = Awaiter<detail::SendOperation, std::error_code>;
  /// Awaiter of an atomic: the previous remote value.
  using AtomicAwaiter = Awaiter<detail::SendOperation, AtomicResult>;
  /// Awaiter of a receive: what arrived.
  using RecvAwaiter = Awaiter<detail::RecvOperation, Received>;

  /// `qp` must be connected (RC) or activated (UD), its send and receive completions must go
  /// to `poller`'s CQ, and both must outlive this object.
  AsyncQueuePair(Poller& poller, QueuePair& qp);
  AsyncQueuePair(const AsyncQueuePair&) = delete;
  AsyncQueuePair& operator=(const AsyncQueuePair&) = delete;
  /// Destroying it with operations in flight is a programming error.
  ~AsyncQueuePair();

  // Buffers are taken by reference: a co_await expression's arguments stay in the
  // coroutine's frame until it resumes, so by value each operation would copy them there.

  /// RDMA WRITE of `local` into `remote`.
  SendAwaiter write(const LocalBuffer& local, const RemoteBuffer& remote,
                    OpOptions options = {}) noexcept;
  /// RDMA READ of `remote` into `local`.
  SendAwaiter read(const LocalBuffer& local, const RemoteBuffer& remote,
                   OpOptions options = {}) noexcept;
  /// SEND of `local` into the peer's next receive.
  SendAwaiter send(const LocalBuffer& local, OpOptions options = {}) noexcept;
  /// SEND with a 32-bit immediate the peer's receive completion carries.
  SendAwaiter send_with_imm(const LocalBuffer& local, uint32_t imm,
                            OpOptions options = {}) noexcept;
  /// RDMA WRITE that also consumes a peer receive, which carries `imm`.
  SendAwaiter write_with_imm(const LocalBuffer& local, const RemoteBuffer& remote, uint32_t imm,
                             OpOptions options = {}) noexcept;
  /// 8-byte atomics; the previous remote value lands in `result` (8 bytes) and is returned.
  AtomicAwaiter compare_swap(const LocalBuffer& result, const RemoteBuffer& target,
                             uint64_t expected, uint64_t desired, OpOptions options = {}) noexcept;
  /// Atomically adds `add` to the 8 bytes at `target`.
  AtomicAwaiter fetch_add(const LocalBuffer& result, const RemoteBuffer& target, uint64_t add,
                          OpOptions options = {}) noexcept;
  /// A work request filled by the caller (any opcode, UD address included). Its scatter list
  /// must stay valid until the awaiter completes; wr_id, next and IBV_SEND_SIGNALED are ours.
  SendAwaiter post(const ibv_send_wr& wr, OpOptions options = {}) noexcept;

  /// A receive into `local`, completed by the peer's next SEND.
  RecvAwaiter recv(const LocalBuffer& local, OpOptions options = {}) noexcept;
  /// A receive without buffer, for the immediate of an RDMA_WRITE_WITH_IMM.
  RecvAwaiter recv_imm(OpOptions options = {}) noexcept;

  /// The QP it drives.
  QueuePair& queue_pair() const noexcept { return qp_; }
  /// Operations submitted and not yet completed (pending or posted).
  uint32_t in_flight() const noexcept { return in_flight_; }
  /// True once the QP went to ERROR (a failed or abandoned operation, a lost peer).
  bool failed() const noexcept { return failed_; }

  /// Sends completed at once (without suspending, see submit()) in a row, at most, before
  /// an awaiter suspends all the same and the poller's other work gets the thread.
  static constexpr uint32_t kMostAtOnceInARow = 16;

 private:
  friend class Poller;
  friend struct detail::Operation;
  /// Intrusive FIFO through Operation::next (inline: it is on every operation's path).
  struct List {
    detail::Operation* head = nullptr;
    detail::Operation* tail = nullptr;
    void push(detail::Operation* op) noexcept {
      op->next = nullptr;
      (tail ? tail->next : head) = op;
      tail = op;
    }
    detail::Operation* pop() noexcept {
      detail::Operation* op = head;
      if (op && !(head = op->next)) tail = nullptr;
      return op;
    }
    bool remove(detail::Operation* op) noexcept;
  };

  // Inline: on every operation's path.
  static void init(detail::SendOperation& op) noexcept {
    op.on_completion = &send_completed;
    op.wr.next = nullptr;
    op.wr.sg_list = &op.sge;
    op.wr.num_sge = 1;
    op.wr.send_flags = 0;  // imm_data is set by the opcodes that carry one
  }
  static void init(detail::RecvOperation& op) noexcept {
    op.on_completion = &recv_completed;
    op.wr.sg_list = &op.sge;
    op.wr.num_sge = 1;
  }
  /// An RDMA WRITE or READ between `local` and `remote`.
  SendAwaiter one_sided(ibv_wr_opcode opcode, const LocalBuffer& local, const RemoteBuffer& remote,
                        OpOptions options) noexcept;
  void set_local(detail::SendOperation& op, const LocalBuffer& local) const noexcept {
    op.sge = local.sge();
    op.wr.num_sge = local.size() != 0 ? 1 : 0;
    // Small payloads travel in the work request: no lkey lookup, the buffer is free at once.
    if (local.size() <= inline_size_ && op.wr.opcode != IBV_WR_RDMA_READ)
      op.wr.send_flags |= IBV_SEND_INLINE;
  }
  // Submission posts an operation at once when nothing is queued before it and the queue
  // has room (one doorbell per operation), and otherwise queues it for the poller's flush
  // (one doorbell per round). The awaiter's type picks the overload. True when the
  // operation has completed already and its awaiter goes on without suspending: a send
  // that is the only operation of the poller's only QP looks for its completion at once
  // (a device that carries it out inside ibv_post_send has it there), at most
  // kMostAtOnceInARow times in a row, so that other work of the thread gets its turn.
  bool submit(detail::SendOperation* op) noexcept;
  bool submit(detail::RecvOperation* op) noexcept;
  /// submit()'s look for the completion of `op`, just posted alone: true if it is complete
  /// (it never entered the lists), else `op` goes in flight as posted.
  bool completed_at_once(detail::SendOperation* op) noexcept;
  /// `done`, the oldest posted send, completed successfully by `wc` and alone: its room
  /// frees (finishing it is the caller's).
  void retire_oldest_send(detail::Operation* done, const ibv_wc& wc) noexcept;
  /// Posts `op`, or queues it when it cannot go now, given that queue's lists and room
  /// (members: the compiler then sees they do not alias the operation).
  template <typename Op>
  void submit_to(Op* op, List AsyncQueuePair::*posted, List AsyncQueuePair::*pending,
                 uint32_t AsyncQueuePair::*room) noexcept;
  bool may_post_at_once(const detail::Operation* op) const noexcept;
  /// One work request on its own; 0 or the verbs error.
  int post_alone(detail::SendOperation& op) noexcept;
  int post_alone(detail::RecvOperation& op) noexcept;
  void queue(List& pending, detail::Operation* op) noexcept;
  /// Out of line: only operations with a timeout or a stop token are timed.
  void start_timing(detail::Operation* op) noexcept;
  void stop_timing(detail::Operation* op) noexcept;
  /// Posts what is pending and fits; returns work requests posted.
  unsigned flush() noexcept;
  unsigned flush_sends() noexcept;
  unsigned flush_recvs() noexcept;
  /// Cancellation and timeouts: finishes pending ones, abandons posted ones.
  void sweep(detail::Operation::Steady::time_point now) noexcept;
  void fail_qp() noexcept;

  static void send_completed(detail::Operation* op, const ibv_wc& wc) noexcept;
  /// A send completion that is not the oldest posted operation's own success: it retires
  /// the unsignalled ones before it, or reports a failure.
  void retire_sends_through(detail::Operation* done, const ibv_wc& wc) noexcept;
  static void recv_completed(detail::Operation* op, const ibv_wc& wc) noexcept;
  void finish(detail::Operation* op, std::error_code result) noexcept;

  Poller& poller_;
  QueuePair& qp_;
  ibv_qp* raw_;
  uint32_t inline_size_;
  List pending_sends_, posted_sends_, pending_recvs_, posted_recvs_;
  uint32_t send_room_;
  uint32_t recv_room_;
  uint32_t signal_interval_;
  uint32_t in_flight_ = 0;
  uint32_t timed_ = 0;             ///< operations with a deadline or a stop token
  uint32_t at_once_in_a_row_ = 0;  ///< sends completed in submit() since the last suspension
  bool failed_ = false;
  bool dirty_ = false;  ///< in the poller's list of QPs with pending operations
  AsyncQueuePair* next_dirty_ = nullptr;
  AsyncQueuePair* next_attached_ = nullptr;
  AsyncQueuePair* prev_attached_ = nullptr;
  std::atomic<bool> cancel_requested_{false};
};

// The operations are inline: the awaiter is then built in place, in the caller's frame.
inline AsyncQueuePair::SendAwaiter AsyncQueuePair::one_sided(ibv_wr_opcode opcode,
                                                             const LocalBuffer& local,
                                                             const RemoteBuffer& remote,
                                                             OpOptions options) noexcept {
  return {this, options, [&](detail::SendOperation& op) {
            op.wr.opcode = opcode;
            op.wr.wr.rdma = {remote.address(), remote.rkey()};
            set_local(op, local);
          }};
}

inline AsyncQueuePair::SendAwaiter AsyncQueuePair::write(const LocalBuffer& local,
                                                         const RemoteBuffer& remote,
                                                         OpOptions options) noexcept {
  return one_sided(IBV_WR_RDMA_WRITE, local, remote, options);
}

inline AsyncQueuePair::SendAwaiter AsyncQueuePair::read(const LocalBuffer& local,
                                                        const RemoteBuffer& remote,
                                                        OpOptions options) noexcept {
  return one_sided(IBV_WR_RDMA_READ, local, remote, options);
}

inline AsyncQueuePair::SendAwaiter AsyncQueuePair::send(const LocalBuffer& local,
                                                        OpOptions options) noexcept {
  return {this, options, [&](detail::SendOperation& op) {
            op.wr.opcode = IBV_WR_SEND;
            set_local(op, local);
          }};
}

inline AsyncQueuePair::SendAwaiter AsyncQueuePair::send_with_imm(const LocalBuffer& local,
                                                                 uint32_t imm,
                                                                 OpOptions options) noexcept {
  return {this, options, [&](detail::SendOperation& op) {
            op.wr.opcode = IBV_WR_SEND_WITH_IMM;
            op.wr.imm_data = htonl(imm);
            set_local(op, local);
          }};
}

inline AsyncQueuePair::SendAwaiter AsyncQueuePair::write_with_imm(const LocalBuffer& local,
                                                                  const RemoteBuffer& remote,
                                                                  uint32_t imm,
                                                                  OpOptions options) noexcept {
  return {this, options, [&](detail::SendOperation& op) {
            op.wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            op.wr.imm_data = htonl(imm);
            op.wr.wr.rdma = {remote.address(), remote.rkey()};
            set_local(op, local);
          }};
}

inline AsyncQueuePair::AtomicAwaiter AsyncQueuePair::compare_swap(const LocalBuffer& result,
                                                                  const RemoteBuffer& target,
                                                                  uint64_t expected,
                                                                  uint64_t desired,
                                                                  OpOptions options) noexcept {
  RDMAKIT_REQUIRE(result.size() == 8 && target.size() == 8,
                  "compare_swap needs 8-byte local and remote buffers");
  return {this, options, [&](detail::SendOperation& op) {
            op.wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
            op.wr.wr.atomic = {target.address(), expected, desired, target.rkey()};
            op.sge = result.sge();
          }};
}

inline AsyncQueuePair::AtomicAwaiter AsyncQueuePair::fetch_add(const LocalBuffer& result,
                                                               const RemoteBuffer& target,
                                                               uint64_t add,
                                                               OpOptions options) noexcept {
  RDMAKIT_REQUIRE(result.size() == 8 && target.size() == 8,
                  "fetch_add needs 8-byte local and remote buffers");
  return {this, options, [&](detail::SendOperation& op) {
            op.wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
            op.wr.wr.atomic = {target.address(), add, 0, target.rkey()};
            op.sge = result.sge();
          }};
}

inline AsyncQueuePair::SendAwaiter AsyncQueuePair::post(const ibv_send_wr& wr,
                                                        OpOptions options) noexcept {
  return {this, options, [&](detail::SendOperation& op) {
            op.wr = wr;
            op.wr.next = nullptr;
          }};
}

inline AsyncQueuePair::RecvAwaiter AsyncQueuePair::recv(const LocalBuffer& local,
                                                        OpOptions options) noexcept {
  return {this, options, [&](detail::RecvOperation& op) {
            op.sge = local.sge();
            if (local.size() == 0) op.wr.num_sge = 0;
          }};
}

inline AsyncQueuePair::RecvAwaiter AsyncQueuePair::recv_imm(OpOptions options) noexcept {
  return {this, options, [](detail::RecvOperation& op) { op.wr.num_sge = 0; }};
}

template <>
inline std::error_code AsyncQueuePair::SendAwaiter::await_resume() noexcept {
  return result;
}

template <>
inline AtomicResult AsyncQueuePair::AtomicAwaiter::await_resume() noexcept {
  AtomicResult out{result, 0};
  if (!result)
    std::memcpy(&out.old_value, reinterpret_cast<const void*>(sge.addr), sizeof(uint64_t));
  return out;
}

template <>
inline Received AsyncQueuePair::RecvAwaiter::await_resume() noexcept {
  return {result, byte_len, imm};
}

}  // namespace rdmakit

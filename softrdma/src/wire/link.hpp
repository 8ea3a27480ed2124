// The requester side of the TCP transport: one connection per remote host, shared by all
// QPs of this process. Responses are read by application threads that poll a CQ, and by a
// thread that sleeps in poll() for applications that do not (it stands by while they take
// every answer themselves, wire/standby.hpp): an answer to a polling application costs no
// thread wake-up. A send never blocks its caller (who holds a QP's send-queue lock, which
// the reader needs to complete answers): what the socket does not take at once waits in a
// backlog that a writer thread, started when first needed, flushes in order. A large payload in
// registered memory waits there by reference, not copied (wire/outgoing.hpp).
#pragma once

#include <sys/uio.h>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "wire/hello.hpp"
#include "wire/outgoing.hpp"
#include "wire/protocol.hpp"
#include "wire/quiet_socket.hpp"
#include "wire/standby.hpp"

namespace softrdma::wire {

class Link {
 public:
  /// The connection from `src_ipv4_be` (0: any address) to the softrdma listener at
  /// `ipv4_be`:`port` (see port_of_qpn), its hello sent (wire/hello.hpp); made (or remade
  /// after a failure) on demand, without waiting for the listener. nullptr when it cannot be
  /// reached right now.
  static std::shared_ptr<Link> to(uint32_t src_ipv4_be, uint32_t ipv4_be, uint16_t port);
  /// The listener's hello came and was taken: what is sent goes out. Until then it waits,
  /// and a hello that is not a softrdma listener's, or not the one expect_listener() named,
  /// breaks the link.
  bool greeted() const { return greeted_.load(std::memory_order_acquire); }
  /// The identity the listener presented, once greeted(): the same for every listener of one
  /// user on that host towards this one, which a QP pins.
  const Identity& listener_identity() const { return listener_identity_; }
  /// Before greeted(): the link is to be used only if the listener presents `identity` (a
  /// QP's pin). The first expectation stands.
  void expect_listener(const Identity& identity);

  enum class Sent {
    kHeaderNow,  // the header is in the socket, behind nothing of ours but what it holds
    kQueued,     // the header waits in the backlog, behind what the socket would not take
    kFailed,     // the link is broken
  };
  /// Sends a request and its payload, or queues what the socket cannot take now. A payload
  /// that `may_borrow` (registered memory of a request that completes only by its answer)
  /// is queued by reference when it is large, else copied.
  Sent send(const Request& header, const iovec* payload, int count, bool may_borrow);
  /// Stops reading requesters' memory: what the backlog still borrows is copied. Call it
  /// before a request sent here completes other than by its answer (or is dropped).
  void stop_borrowing();
  bool alive() const { return alive_.load(std::memory_order_acquire); }
  /// A count that grows whenever the peer's kernel acknowledges bytes of ours or sends us
  /// some: unchanged over a while, the peer takes and answers nothing. A system call.
  uint64_t progress() const;

  /// Handles, from the calling application thread, the responses that have arrived on this
  /// process's links whose reader is not at it. Call it holding no QP's lock (handling an
  /// answer takes its QP's). True if any response was handled.
  static bool take_arrived_responses() {
    return open_links.load(std::memory_order_relaxed) != 0 && take_arrived_responses_now();
  }

  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

 private:
  Link(int fd, uint32_t ipv4_be, uint16_t port) : fd_(fd), ipv4_be_(ipv4_be), port_(port) {}
  /// Takes the listener's hello at the front of input_ (the caller holds read_mutex_).
  /// False: not one to use (said in a notice).
  bool take_hello();
  static bool take_arrived_responses_now();
  /// Links of this process (of its parent, in a forked child until it makes one): checked
  /// inline on every poll, so a process without any pays nothing more.
  static inline std::atomic<size_t> open_links{0};
  static void read_loop(std::shared_ptr<Link> self);
  /// Reads what the socket holds, without waiting, and handles every complete response;
  /// the caller holds read_mutex_. False once the link is broken (closed by the peer, a
  /// malformed response): only the reader then reports it down.
  bool take_responses(bool& handled);
  static void flush_loop(std::shared_ptr<Link> self);
  /// Sends writing_ whole, waiting for room without holding a lock; false on failure.
  bool write_out();
  /// Queues the bytes of `iov` from byte `offset` on, borrowing iovecs from
  /// `first_borrowed` on; the caller holds write_mutex_.
  void queue(const iovec* iov, int count, size_t offset, int first_borrowed);
  void shut();
  void shut_holding_lock();

  int fd_;
  const uint32_t ipv4_be_;  // where it leads, for notices
  const uint16_t port_;
  std::atomic<bool> greeted_{false};
  Identity listener_identity_{};      // written once, before greeted_
  std::optional<Identity> expected_;  // guarded by write_mutex_
  std::mutex read_mutex_;             // guards the members below: one thread reads at a time
  std::vector<char> input_;           // bytes read, up to filled_, not yet handled
  size_t filled_ = 0;
  uint64_t bytes_read_ = 0;  // ever, by any thread
  QuietSocket quiet_;        // how often applications' looks read the socket
  bool broken_ = false;
  std::mutex write_mutex_;  // guards the members below and the order of bytes on fd_
  std::condition_variable backlog_ready_;
  std::deque<Outgoing> backlog_;
  bool flushing_ = false;  // the writer thread is writing what it took from the backlog
  bool flusher_started_ = false;
  // Guards writing_ and the borrowed ranges of the backlog's entries (taken after
  // write_mutex_ where both are held); the writer holds it only while it copies into the
  // socket, never while it waits for room.
  std::mutex borrow_mutex_;
  Outgoing writing_;                  // what the writer thread took from the backlog
  std::atomic<size_t> borrowing_{0};  // entries that borrow, writing_ included
  std::weak_ptr<Link> self_;          // for starting the writer thread
  Standby standby_;                   // the reader's, while applications take the answers
  std::atomic<bool> alive_{true};
};

/// Called by a link's reader for every well-formed response (defined by the requester).
void on_response(Link& link, const Response& response, std::span<const char> payload);
/// Called when a link breaks: its requests in flight will not be answered.
void on_link_down(Link& link);

}  // namespace softrdma::wire

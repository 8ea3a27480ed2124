// The RC link: staging and writing spans, receiving and checking them, credits, and the
// out-of-line payloads pulled by RDMA READ (see rc_link.hpp).
#include "rc/rc_link.hpp"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <thread>

#include "rdmakit/error.hpp"
#include "rdmakit/rpc/status.hpp"

namespace rdmakit::rpc::detail::rc {
namespace {

// wr_ids of our own work requests: the number of work requests the completion accounts for
// (unsignalled ones before it, and itself) in the low 32 bits; a pull also carries its
// channel. The device's shared receives use kReceiveTag.
constexpr uint64_t kPullTag = uint64_t{1} << 62;
static_assert((kPullTag & kReceiveTag) == 0);

constexpr uint64_t round_up(uint64_t position, uint64_t ring) noexcept {
  return (position + ring - 1) / ring * ring;
}

constexpr int index(Channel channel) noexcept {
  return static_cast<int>(channel);
}
constexpr Channel other(Channel channel) noexcept {
  return channel == Channel::request ? Channel::response : Channel::request;
}

bool belongs_to(Channel channel, FrameKind kind) noexcept {
  return channel == Channel::request ? kind == FrameKind::request || kind == FrameKind::ping
                                     : kind == FrameKind::response || kind == FrameKind::pong;
}

}  // namespace

std::unique_ptr<RcLink> RcLink::open(std::shared_ptr<RcDevice> device, Connection connection,
                                     const Setup& setup, std::error_code& error) {
  std::unique_ptr<RcLink> link;
  try {
    link = std::make_unique<RcLink>(device, std::move(connection), setup);
  } catch (const Error& e) {
    error = e.code();
    return nullptr;
  }
  // Attached before the hello goes: the peer's hello and spans may follow at once.
  device->attach(link->qpn_, link.get());
  Hello hello{kMagic, link->receive_.remote().rkey(), link->receive_.remote().address()};
  ibv_sge sge{reinterpret_cast<uintptr_t>(&hello), sizeof hello, 0};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
  wr.wr_id = 1;  // accounts for itself
  link->sends_outstanding_ = 1;
  if (std::error_code ec = link->connection_.qp().post_send(wr)) {
    error = ec;
    return nullptr;
  }
  return link;
}

bool RcLink::await_peer(std::chrono::steady_clock::time_point deadline) {
  while (!peer_ && !failure_ && std::chrono::steady_clock::now() < deadline) {
    device_->poll();
    std::this_thread::yield();
  }
  return peer_.has_value() && !failure_;
}

RcLink::RcLink(std::shared_ptr<RcDevice> device, Connection connection, const Setup& setup)
    : device_(std::move(device)),
      setup_(setup),
      inline_max_(setup.peer_ring_bytes / 4),
      grants_(device_->pd(), Access::remote_read),
      receive_(device_->pd(), 2 * size_t{setup.ring_bytes} + sizeof(ControlBlock),
               Access::local_write | Access::remote_write),
      staging_(device_->pd(), 2 * size_t{setup.peer_ring_bytes}, Access::local_write),
      connection_(std::move(connection)) {
  limits_ = setup.limits;
  qpn_ = connection_.qp().qpn();
  send_depth_ = connection_.qp().caps().send_depth;
  inline_size_ = connection_.negotiated().inline_size;
  wait_fd_ = dup(device_->channel_fd());
  if (wait_fd_ < 0) throw_verbs_error("dup", errno, "the completion channel of an rc:// session");
}

RcLink::~RcLink() {
  // Revoked before the payloads go back to the pool, where another session may reuse them.
  for (Out& o : out_) {
    if (o.begun) withdraw(o.begun->grant);
    for (Grant& grant : o.grants) withdraw(grant);
  }
  device_->detach(qpn_);
  close(wait_fd_);
}

std::byte* RcLink::ring(std::byte* base, Channel channel, uint32_t ring_bytes) const noexcept {
  return base + size_t{ring_bytes} * static_cast<size_t>(index(channel));
}

size_t RcLink::memory_bytes() const noexcept {
  return receive_.size() + staging_.size();
}

void RcLink::fail(std::error_code why) noexcept {
  if (!failure_) failure_ = why;
}

// --- sending

std::byte* RcLink::begin(Channel channel, FrameHeader& header) {
  if (failure_ || peer_closed_) return nullptr;
  Out& o = out_[index(channel)];
  if (o.begun) withdraw(o.begun->grant);
  o.begun.reset();
  const uint64_t ring_bytes = setup_.peer_ring_bytes;
  const bool out_of_line = header.length > inline_max_;
  const uint64_t bytes = out_of_line ? sizeof(FrameHeader) : frame_bytes(header.length);
  uint64_t at = o.pending;
  if (at % ring_bytes + bytes > ring_bytes) {
    if (o.skip_from) return nullptr;  // one skip per flush; the next flush makes room
    at = round_up(at, ring_bytes);
  }
  if (at + bytes > o.released + ring_bytes) {
    refresh_released(channel);
    if (at + bytes > o.released + ring_bytes) return nullptr;
  }
  Out::Begun begun{at, bytes, {}};
  std::byte* frame = ring(staging_.data(), channel, setup_.peer_ring_bytes) + at % ring_bytes;
  std::byte* payload = frame + sizeof(FrameHeader);
  if (out_of_line) {
    std::error_code ec;
    begun.grant.payload = device_->payloads().take(header.length, ec);
    if (ec) return nullptr;
    const rdmakit::Grant g = grants_.grant(begun.grant.payload.data(), header.length,
                                           Access::remote_read, setup_.grant_lifetime, ec);
    if (ec) {
      device_->payloads().give_back(std::move(begun.grant.payload));
      return nullptr;
    }
    begun.grant.id = g.id;
    header.flags |= kOutOfLine;
    header.out_of_line = g.remote.address();
    header.out_of_line_tag = g.remote.rkey();
    payload = begun.grant.payload.data();
  }
  std::memcpy(frame, &header, sizeof header);
  o.begun = std::move(begun);
  return payload;
}

void RcLink::commit(Channel channel) {
  Out& o = out_[index(channel)];
  if (!o.begun) return;
  if (o.begun->at != o.pending) o.skip_from = o.pending;
  o.pending = o.begun->at + o.begun->bytes;
  if (o.begun->grant.id != 0) o.grants.push_back(std::move(o.begun->grant));
  o.begun.reset();
}

void RcLink::refresh_released(Channel channel) noexcept {
  // The control block is written by the peer: one copy, checked like any credit.
  ControlBlock block;
  std::memcpy(&block, receive_.data() + 2 * size_t{setup_.ring_bytes}, sizeof block);
  Out& o = out_[index(channel)];
  const uint64_t told = block.released[index(channel)];
  if (told > o.released && told <= o.published) o.released = told;
}

bool RcLink::flush() {
  write_pending(true);
  return false;  // the peer's completion queue wakes it
}

bool RcLink::write_pending(bool with_credits) {
  // Per channel up to three spans (a ring boundary and a skip), then credits and two pull
  // reports. Nothing changes before we know they can all be posted.
  constexpr size_t kMost = 9;
  if (!peer_ || failure_) return false;
  // Every poll asks (receive()): most find nothing to write, and setting up the work
  // requests below cost them more than the rest of the poll.
  const bool spans = out_[0].pending != out_[0].published || out_[1].pending != out_[1].published;
  const bool pulls = in_[0].pulls_done != 0 || in_[1].pulls_done != 0;
  const bool credits = with_credits && (in_[0].released != in_[0].released_told ||
                                        in_[1].released != in_[1].released_told);
  if (!spans && !pulls && !credits) return true;
  if (sends_outstanding_ + kMost > send_depth_) return false;
  // Each entry is cleared as it is used (a flush is mostly one span, not kMost).
  std::array<ibv_send_wr, kMost> wrs;
  std::array<ibv_sge, kMost> sges;
  size_t n = 0;
  bool carried[2] = {false, false};
  const uint64_t peer_ring = setup_.peer_ring_bytes;
  auto write = [&](uint32_t imm, uint64_t remote_offset, const std::byte* local, uint32_t bytes) {
    ibv_send_wr& wr = wrs[n] = {};
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = peer_->base + remote_offset;
    wr.wr.rdma.rkey = peer_->rkey;
    if (bytes > 0) {
      sges[n] = {reinterpret_cast<uintptr_t>(local), bytes, staging_.local().lkey()};
      wr.sg_list = &sges[n];
      wr.num_sge = 1;
      if (bytes <= inline_size_) wr.send_flags = IBV_SEND_INLINE;
    }
    ++n;
  };
  auto one_span = [&](Channel channel, uint64_t from, uint64_t to, bool wrap) {
    In& paired = in_[index(other(channel))];  // the credit it carries
    const auto kind = channel == Channel::request ? ImmKind::request_span : ImmKind::response_span;
    const uint32_t credit = static_cast<uint32_t>(paired.released / kFrameAlign);
    paired.released_told = paired.released;
    carried[index(other(channel))] = true;
    const uint64_t offset = index(channel) * peer_ring + from % peer_ring;
    write(make_imm(kind, wrap, credit), offset,
          ring(staging_.data(), channel, setup_.peer_ring_bytes) + from % peer_ring,
          static_cast<uint32_t>(to - from));
  };
  // A span is contiguous in the ring: one that reaches past the ring's end is split there.
  auto span = [&](Channel channel, uint64_t from, uint64_t to, bool wrap) {
    while (from < to) {
      const uint64_t end = std::min(to, (from / peer_ring + 1) * peer_ring);
      one_span(channel, from, end, wrap);
      wrap = false;
      from = end;
    }
  };
  // Requests' credits ride on responses and the reverse: responses first, as they free the
  // caller's window sooner.
  for (Channel channel : {Channel::response, Channel::request}) {
    Out& o = out_[index(channel)];
    if (o.pending == o.published) continue;
    if (o.skip_from) {
      if (*o.skip_from > o.published) span(channel, o.published, *o.skip_from, false);
      span(channel, round_up(*o.skip_from, peer_ring), o.pending, true);
    } else {
      span(channel, o.published, o.pending, false);
    }
  }
  ControlBlock block{};
  const bool untold[2] = {in_[0].released != in_[0].released_told && !carried[0],
                          in_[1].released != in_[1].released_told && !carried[1]};
  if (with_credits && (untold[0] || untold[1])) {
    // No traffic carries them: write them into the peer's control block.
    block.released[0] = in_[0].released_told = in_[0].released;
    block.released[1] = in_[1].released_told = in_[1].released;
    ibv_send_wr& wr = wrs[n] = {};
    sges[n] = {reinterpret_cast<uintptr_t>(&block), sizeof block, 0};
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &sges[n];
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_INLINE;
    wr.wr.rdma.remote_addr = peer_->base + 2 * peer_ring;
    wr.wr.rdma.rkey = peer_->rkey;
    ++n;
  }
  for (Channel channel : {Channel::request, Channel::response}) {
    In& in = in_[index(channel)];
    if (in.pulls_done == 0) continue;
    write(make_imm(ImmKind::pulled, channel == Channel::response, in.pulls_done), 0, nullptr, 0);
    in.pulls_done = 0;
  }
  if (n == 0) return true;
  for (size_t i = 0; i + 1 < n; ++i) wrs[i].next = &wrs[i + 1];
  unsignalled_ += static_cast<uint32_t>(n);
  if (unsignalled_ >= send_depth_ / 2 || sends_outstanding_ + n > send_depth_ / 2) {
    wrs[n - 1].send_flags |= IBV_SEND_SIGNALED;
    wrs[n - 1].wr_id = unsignalled_;
    unsignalled_ = 0;
  }
  sends_outstanding_ += static_cast<uint32_t>(n);
  if (std::error_code ec = connection_.qp().post_send(wrs[0])) {
    fail(make_error_code(Errc::session_closed));
    return false;
  }
  for (Out& o : out_) {
    o.published = o.pending;
    o.skip_from.reset();
  }
  return true;
}

void RcLink::shut_down() {
  if (!peer_ || failure_) return;
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = htonl(make_imm(ImmKind::closing, false, 0));
  wr.wr.rdma.remote_addr = peer_->base;
  wr.wr.rdma.rkey = peer_->rkey;
  (void)connection_.qp().post_send(wr);  // the peer's QP errors also tell it
}

// --- receiving

void RcLink::on_completion(const ibv_wc& wc, std::span<const std::byte> sent) {
  if (wc.status != IBV_WC_SUCCESS) {
    fail(make_error_code(Errc::session_closed));  // the peer is gone or broke the QP
    return;
  }
  if ((wc.wr_id & kReceiveTag) == 0) {
    const auto covered = static_cast<uint32_t>(wc.wr_id);
    sends_outstanding_ -= std::min(covered, sends_outstanding_);
    if (wc.wr_id & kPullTag) in_[(wc.wr_id >> 32) & 1].pulled = true;
    return;
  }
  if (wc.opcode == IBV_WC_RECV) {
    on_hello(sent);
    return;
  }
  const uint32_t imm = ntohl(wc.imm_data);
  if (!peer_) {
    fail(make_error_code(Errc::protocol_error));  // nothing may come before the hello
    return;
  }
  switch (imm_kind(imm)) {
    case ImmKind::request_span:
      on_span(Channel::request, imm, wc.byte_len);
      break;
    case ImmKind::response_span:
      on_span(Channel::response, imm, wc.byte_len);
      break;
    case ImmKind::pulled:
      on_pulled(imm_wrap(imm) ? Channel::response : Channel::request, imm_value(imm));
      break;
    case ImmKind::closing:
      peer_closed_ = true;
      break;
  }
}

void RcLink::on_hello(std::span<const std::byte> sent) {
  Hello hello;
  if (peer_ || sent.size() != sizeof hello) {
    fail(make_error_code(Errc::protocol_error));
    return;
  }
  std::memcpy(&hello, sent.data(), sizeof hello);
  if (hello.magic != kMagic) {
    fail(make_error_code(Errc::protocol_error));
    return;
  }
  peer_ = hello;
}

void RcLink::on_span(Channel channel, uint32_t imm, uint32_t bytes) {
  In& in = in_[index(channel)];
  const uint64_t ring_bytes = setup_.ring_bytes;
  if (bytes == 0 || bytes % kFrameAlign != 0) {
    fail(make_error_code(Errc::protocol_error));
    return;
  }
  uint64_t at = in.arrived;
  if (imm_wrap(imm)) at = round_up(at, ring_bytes);
  // Spans never cross the end of the ring, nor go beyond the space we released.
  if (at % ring_bytes + bytes > ring_bytes || at + bytes > in.released + ring_bytes) {
    fail(make_error_code(Errc::protocol_error));
    return;
  }
  if (at != in.arrived) in.skips.emplace_back(in.arrived, at);
  in.arrived = at + bytes;
  Out& o = out_[index(other(channel))];
  const uint64_t released = expand_credit(o.released, imm_value(imm));
  if (released > o.published) {
    fail(make_error_code(Errc::protocol_error));  // releases what it never got
    return;
  }
  o.released = released;
}

void RcLink::withdraw(Grant& grant) noexcept {
  if (grant.id != 0) grants_.revoke(grant.id);  // false if it expired: revoked already
  device_->payloads().give_back(std::move(grant.payload));
}

void RcLink::on_pulled(Channel channel, uint32_t count) {
  Out& o = out_[index(channel)];
  if (count > o.grants.size()) {
    fail(make_error_code(Errc::protocol_error));
    return;
  }
  for (uint32_t i = 0; i < count; ++i) {
    withdraw(o.grants.front());
    o.grants.pop_front();
  }
}

int RcLink::receive(FrameSink& sink, int budget) {
  device_->poll();
  write_pending(false);  // what a full send queue or a late hello held back
  if (failure_) return 0;
  int n = deliver(Channel::response, sink, budget);
  n += deliver(Channel::request, sink, budget - n);
  return n;
}

bool RcLink::start_pull(In& in, const FrameHeader& h) {
  if (sends_outstanding_ + 1 > send_depth_) return false;
  std::error_code ec;
  in.pull_buffer = device_->payloads().take(h.length, ec);
  if (ec) {
    fail(make_error_code(Errc::message_too_large));
    return false;
  }
  ibv_sge sge{reinterpret_cast<uintptr_t>(in.pull_buffer.data()), h.length,
              in.pull_buffer.local().lkey()};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_READ;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = h.out_of_line;
  wr.wr.rdma.rkey = h.out_of_line_tag;
  const uint64_t channel = &in == &in_[index(Channel::response)] ? 1 : 0;
  wr.wr_id = kPullTag | (channel << 32) | (unsignalled_ + 1);
  unsignalled_ = 0;
  ++sends_outstanding_;
  if (connection_.qp().post_send(wr)) {
    fail(make_error_code(Errc::session_closed));
    return false;
  }
  in.pulling = true;
  in.pulled = false;
  in.pull_header = h;
  return true;
}

int RcLink::deliver(Channel channel, FrameSink& sink, int budget) {
  In& in = in_[index(channel)];
  const uint64_t ring_bytes = setup_.ring_bytes;
  std::byte* base = ring(receive_.data(), channel, setup_.ring_bytes);
  int n = 0;
  while (n < budget && !failure_) {
    if (in.pulling) {
      if (!in.pulled) break;
      in.pulling = false;
      ++in.pulls_done;
      const uint64_t cookie = in.first_held + in.held.size();
      in.held.push_back({in.head, false, std::move(in.pull_buffer)});
      in.head += sizeof(FrameHeader);
      ++n;
      const Held& held = in.held.back();
      sink.on_frame(in.pull_header,
                    std::span<const std::byte>(held.pulled.data(), in.pull_header.length), cookie);
      continue;
    }
    if (!in.skips.empty() && in.head == in.skips.front().first) {
      in.head = in.skips.front().second;
      in.skips.pop_front();
      advance_released(in);
      continue;
    }
    const uint64_t end = in.skips.empty() ? in.arrived : in.skips.front().first;
    if (in.head == end) break;
    const FrameHeader h = read_header(base + in.head % ring_bytes);
    const bool out_of_line = (h.flags & kOutOfLine) != 0;
    const uint64_t bytes = out_of_line ? sizeof(FrameHeader) : frame_bytes(h.length);
    if (!valid_kind(h.kind) || !belongs_to(channel, h.kind) || (h.flags & ~kOutOfLine) != 0 ||
        h.length > limits_.max_message_bytes || in.head + bytes > end ||
        in.head % ring_bytes + bytes > ring_bytes || (out_of_line && h.length == 0)) {
      fail(make_error_code(Errc::protocol_error));
      break;
    }
    if (out_of_line) {
      if (!start_pull(in, h)) break;
      continue;
    }
    const uint64_t cookie = in.first_held + in.held.size();
    const uint64_t start = in.head;
    in.held.push_back({start, false, {}});
    in.head += bytes;
    ++n;
    sink.on_frame(h, std::span<const std::byte>(base + start % ring_bytes + sizeof h, h.length),
                  cookie);
  }
  return n;
}

void RcLink::release(Channel channel, uint64_t cookie) {
  In& in = in_[index(channel)];
  if (cookie < in.first_held || cookie - in.first_held >= in.held.size()) return;
  Held& held = in.held[cookie - in.first_held];
  held.released = true;
  device_->payloads().give_back(std::move(held.pulled));
  while (!in.held.empty() && in.held.front().released) {
    in.held.pop_front();
    ++in.first_held;
  }
  advance_released(in);
}

void RcLink::advance_released(In& in) noexcept {
  in.released = in.held.empty() ? in.head : in.held.front().start;
}

size_t RcLink::reservation(uint32_t max_response) const {
  // The peer sends a reply larger than a quarter of our ring out of line (only its header
  // takes ring space), but a smaller reply within the reservation travels inline.
  return frame_bytes(std::min(max_response, setup_.ring_bytes / 4));
}

size_t RcLink::response_capacity() const {
  // Less the largest skip at the end of the ring, which the reservations do not count.
  return setup_.ring_bytes - frame_bytes(setup_.ring_bytes / 4);
}

std::error_code RcLink::failure() const {
  if (failure_) return failure_;
  if (peer_closed_ && !has_input()) return make_error_code(Errc::session_closed);
  return {};
}

void RcLink::check_alive() {
  grants_.revoke_expired();  // grants live as long as a call may; their memory stays ours
  if (connection_.qp().state() == IBV_QPS_ERR) fail(make_error_code(Errc::session_closed));
}

void RcLink::set_sleeping(bool sleeping) {
  if (sleeping)
    device_->arm();
  else
    device_->disarm();
}

bool RcLink::has_input() const {
  device_->poll();
  for (const In& in : in_) {
    if (in.head != in.arrived || !in.skips.empty() || (in.pulling && in.pulled)) return true;
  }
  return false;
}

}  // namespace rdmakit::rpc::detail::rc

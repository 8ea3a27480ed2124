#include "ring/ring_link.hpp"

#include <atomic>
#include <cstring>

#include "core/publish_order.hpp"
#include "rdmakit/rpc/status.hpp"

namespace rdmakit::rpc::detail {

RingLink::RingLink(Segment segment, int side, std::unique_ptr<RingPeer> peer)
    : segment_(std::move(segment)),
      side_(side),
      peer_(std::move(peer)),
      ring_bytes_(segment_.ring_bytes()) {
  SegmentHeader& h = segment_.header();
  const Segment::Layout& layout = segment_.layout();
  limits_ = {layout.window, layout.max_message_bytes};
  for (Channel ch : {Channel::request, Channel::response}) {
    const int c = static_cast<int>(ch);
    const int mine = ring_index(side_, ch);
    const int theirs = ring_index(1 - side_, ch);
    out_[c].base = segment_.ring(mine);
    out_[c].tail = &h.tail[mine];
    out_[c].released = &h.released[mine];
    in_[c].base = segment_.ring(theirs);
    in_[c].tail = &h.tail[theirs];
    in_[c].released = &h.released[theirs];
    // The peer's calls in flight, plus one liveness probe (or its answer).
    In& in = in_[c];
    in.held.resize(size_t{limits_.window} + 2);
    for (uint32_t i = 0; i < in.held.size(); ++i)
      in.held[i].next = i + 1 < in.held.size() ? i + 1 : kNone;
    in.free = 0;
    // Positions start at the segment's color, not at what the header says now: the peer may
    // have published already.
    const uint64_t start = Segment::start_position(layout.color);
    in.head = in.released_position = start;
    out_[c].pending = out_[c].published = out_[c].released_seen = start;
    const auto channel = static_cast<uint8_t>(c);
    in.out_of_line = std::make_unique<OutOfLineReceiver>(*peer_, channel, limits_.window,
                                                         segment_.released_counters(theirs));
    out_[c].out_of_line = std::make_unique<OutOfLineSender>(*peer_, channel, limits_.window,
                                                            segment_.released_counters(mine));
  }
}

RingLink::~RingLink() {
  shut_down();
  // The buffers go before the peer object that frees them.
  for (In& in : in_) in.out_of_line.reset();
  for (Out& o : out_) o.out_of_line.reset();
}

void RingLink::shut_down() {
  SegmentHeader& h = segment_.header();
  if (h.closed[side_].value.exchange(1, std::memory_order_seq_cst) != 0) return;
  peer_->published(h.sleeping[1 - side_].value.load(std::memory_order_seq_cst) != 0);
}

void RingLink::fail(std::error_code error) noexcept {
  if (!failure_) failure_ = error;
}

size_t RingLink::reservation(uint32_t max_response) const {
  // A reply up to inline_max() travels inline, whatever max_response allows beyond it.
  return frame_bytes(std::min<size_t>(max_response, inline_max()));
}

bool RingLink::refresh_released(Out& o) {
  const uint64_t released = o.released->value.load(std::memory_order_acquire);
  if (released < o.released_seen || released > o.published) {
    fail(Errc::protocol_error);  // the consumer's position moved backwards or past ours
    return false;
  }
  o.released_seen = released;
  return true;
}

std::byte* RingLink::begin(Channel channel, FrameHeader& header) {
  if (failure_) return nullptr;
  Out& o = out_[static_cast<int>(channel)];
  const bool out_of_line = header.length > inline_max();
  const uint64_t bytes = frame_bytes(out_of_line ? 0 : header.length);
  if (o.pending + bytes - o.released_seen > ring_bytes_ &&
      (!refresh_released(o) || o.pending + bytes - o.released_seen > ring_bytes_))
    return nullptr;
  std::byte* at = o.base + (o.pending & (ring_bytes_ - 1));
  std::byte* payload = at + sizeof(FrameHeader);
  o.begun_out_of_line = out_of_line;
  if (out_of_line) {
    payload = o.out_of_line->take(header.length, header.out_of_line_tag, header.out_of_line);
    if (payload == nullptr) return nullptr;  // every buffer still in use: try again later
    header.flags = static_cast<uint16_t>(header.flags | kOutOfLine);
  }
  std::memcpy(at, &header, sizeof header);
  o.begun_bytes = bytes;
  return payload;
}

void RingLink::commit(Channel channel) {
  Out& o = out_[static_cast<int>(channel)];
  o.pending += o.begun_bytes;
  if (o.begun_out_of_line && !o.out_of_line->commit()) fail(Errc::session_closed);
  o.begun_out_of_line = false;
  o.begun_bytes = 0;
}

bool RingLink::flush() {
  bool any = false;
  for (Out& o : out_) {
    if (o.pending != o.published) {
      o.tail->value.store(o.pending, kPublishOrder);
      o.published = o.pending;
      any = true;
    }
  }
  return any;
}

void RingLink::notify() {
  // After the fence: either the peer sees our frames before it sleeps (its store of the flag
  // and its look at our tails are sequentially consistent, see set_sleeping() and
  // has_input()), or we see its flag here and signal it.
  peer_->published(segment_.header().sleeping[1 - side_].value.load(std::memory_order_seq_cst) !=
                   0);
}

int RingLink::receive(FrameSink& sink, int budget) {
  const int start = budget;
  receiving_ = true;
  if (receive_ring(in_[static_cast<int>(Channel::response)], Channel::response, sink, budget))
    receive_ring(in_[static_cast<int>(Channel::request)], Channel::request, sink, budget);
  receiving_ = false;
  for (In& in : in_) publish_released(in);
  return start - budget;
}

bool RingLink::receive_ring(In& in, Channel channel, FrameSink& sink, int& budget) {
  if (failure_) return false;
  const uint64_t tail = in.tail->value.load(std::memory_order_acquire);
  if (tail == in.head) return true;
  if (tail < in.head || tail - in.released_position > ring_bytes_) {
    fail(Errc::protocol_error);  // the producer claims more than the ring holds
    return false;
  }
  const FrameKind first_kind =
      channel == Channel::request ? FrameKind::request : FrameKind::response;
  const FrameKind probe_kind = channel == Channel::request ? FrameKind::ping : FrameKind::pong;
  while (in.head != tail && budget > 0) {
    if (in.free == kNone) {
      fail(Errc::protocol_error);  // more calls in flight than the window allows
      return false;
    }
    std::byte* at = in.base + (in.head & (ring_bytes_ - 1));
    const FrameHeader h = read_header(at);
    const bool out_of_line = (h.flags & kOutOfLine) != 0;
    const uint64_t bytes = frame_bytes(out_of_line ? 0 : h.length);
    const bool valid = (h.kind == first_kind || h.kind == probe_kind) &&
                       (h.flags & ~kOutOfLine) == 0 && h.length <= limits_.max_message_bytes &&
                       (out_of_line ? h.length > inline_max() : h.length <= inline_max()) &&
                       bytes <= tail - in.head;
    if (!valid) {
      fail(Errc::protocol_error);
      return false;
    }
    std::span<const std::byte> payload(at + sizeof(FrameHeader), out_of_line ? 0 : h.length);
    uint32_t buffer_slot = kNone;
    if (out_of_line) {
      payload = in.out_of_line->open(h.out_of_line_tag, h.out_of_line, h.length, buffer_slot);
      if (payload.empty()) {
        fail(Errc::protocol_error);
        return false;
      }
    }
    const uint32_t slot = in.free;
    in.free = in.held[slot].next;
    in.held[slot] = Held{in.head, buffer_slot, in.newest, kNone};
    (in.newest != kNone ? in.held[in.newest].next : in.oldest) = slot;
    in.newest = slot;
    in.head += bytes;
    --budget;
    sink.on_frame(h, payload, slot);
    if (failure_) return false;
  }
  return true;
}

void RingLink::release(Channel channel, uint64_t cookie) {
  In& in = in_[static_cast<int>(channel)];
  const auto slot = static_cast<uint32_t>(cookie);
  Held& held = in.held[slot];
  if (held.out_of_line_slot != kNone) in.out_of_line->close(held.out_of_line_slot);
  (held.previous != kNone ? in.held[held.previous].next : in.oldest) = held.next;
  (held.next != kNone ? in.held[held.next].previous : in.newest) = held.previous;
  const bool was_oldest = held.previous == kNone;
  held = Held{};
  held.next = in.free;
  in.free = slot;
  if (was_oldest && !receiving_) publish_released(in);
}

void RingLink::publish_released(In& in) {
  // Space returns up to the oldest frame still held: everything before it is released.
  const uint64_t position = in.oldest != kNone ? in.held[in.oldest].start : in.head;
  if (position == in.released_position) return;
  in.released_position = position;
  in.released->value.store(position, std::memory_order_release);
}

void RingLink::check_alive() {
  if (failure_) return;
  if (segment_.header().closed[1 - side_].value.load(std::memory_order_acquire) != 0 &&
      !has_input()) {
    fail(Errc::session_closed);
    return;
  }
  if (std::error_code gone = peer_->check_alive(); gone && !has_input()) fail(gone);
}

void RingLink::set_sleeping(bool sleeping) {
  segment_.header().sleeping[side_].value.store(sleeping ? 1 : 0, std::memory_order_seq_cst);
  if (!sleeping) peer_->woke();
}

bool RingLink::has_input() const {
  for (const In& in : in_) {
    if (in.tail->value.load(std::memory_order_seq_cst) != in.head) return true;
  }
  return false;
}

}  // namespace rdmakit::rpc::detail

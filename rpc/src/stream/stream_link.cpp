// The stream link: the send buffer, the frame parser and its checks, and the end of the
// stream (see stream_link.hpp).
#include "stream/stream_link.hpp"

#include <cstring>

#include "rdmakit/rpc/status.hpp"

namespace rdmakit::rpc::detail {
namespace {

// Reads go into chunks of this size (and into a frame's own chunk when it is larger).
constexpr size_t kChunkBytes = 64 * 1024;
// A drained send buffer larger than this is freed: a large message leaves no large buffer.
constexpr size_t kKeptSendCapacity = 1024 * 1024;

}  // namespace

StreamLink::StreamLink(std::unique_ptr<ByteStream> stream, LinkLimits limits, AwaitedHello hello)
    : stream_(std::move(stream)),
      awaited_(hello),
      hello_(hello.bytes),
      hello_missing_(hello.bytes),
      in_(kChunkBytes) {
  limits_ = limits;
}

std::byte* StreamLink::begin(Channel, FrameHeader& header) {
  if (failure()) return nullptr;
  // The vector is sized here, before the payload pointer is handed out, and not touched
  // again until commit(). Its new bytes are zero: the padding goes out as zeros. A frame
  // begun and never committed is overwritten.
  out_.resize(committed_);
  out_.resize(committed_ + frame_bytes(header.length));
  std::byte* at = out_.data() + committed_;
  std::memcpy(at, &header, sizeof header);
  return at + sizeof header;
}

void StreamLink::commit(Channel) {
  committed_ = out_.size();
}

void StreamLink::send_pending() {
  if (sent_ == committed_ || closed_ || failure_) return;
  sent_ += stream_->write(std::span<const std::byte>(out_.data() + sent_, committed_ - sent_));
  note_end();
  if (sent_ == committed_) {
    out_.clear();
    if (out_.capacity() > kKeptSendCapacity) out_.shrink_to_fit();
    sent_ = committed_ = 0;
  } else if (sent_ >= committed_ - sent_) {
    // Under steady load the buffer may never drain: drop the sent prefix once it is at least
    // as long as the rest, so each byte is moved at most once on average.
    out_.erase(out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(sent_));
    committed_ -= sent_;
    sent_ = 0;
  }
}

int StreamLink::receive(FrameSink& sink, int budget) {
  stream_->progress();
  send_pending();  // the rest of a flush the stream did not take at once
  if (hello_missing_ > 0 && !read_hello()) return 0;
  int delivered = deliver(sink, budget);
  // A peer that sends but does not read would make our output grow without end: honest
  // traffic never has more unsent than a window of requests and one of replies, so beyond
  // that stop reading (the stream then holds the peer back).
  const uint64_t most_unsent =
      2 * uint64_t{limits_.window} * (frame_bytes(limits_.max_message_bytes) + sizeof(FrameHeader));
  bool more = committed_ - sent_ <= most_unsent;
  while (more && delivered < budget && !failure_ && !closed_) {
    more = read_some();
    delivered += deliver(sink, budget - delivered);
  }
  stream_->progress();  // acknowledges what was read
  return delivered;
}

void StreamLink::refuse_peer() {
  failure_ = make_error_code(Errc::protocol_error);
  stream_->shut_down();  // the peer learns at once, not when the link is destroyed
}

bool StreamLink::read_hello() {
  if (failure_ || closed_) return false;
  // Exactly the hello: frames follow it, and must land 16-byte aligned in the chunks.
  hello_missing_ -= stream_->read(
      std::span<std::byte>(hello_.data() + hello_.size() - hello_missing_, hello_missing_));
  note_end();
  if (hello_missing_ > 0) return false;
  if (awaited_.accept(hello_)) return true;
  refuse_peer();
  return false;
}

int StreamLink::deliver(FrameSink& sink, int budget) {
  int delivered = 0;
  while (delivered < budget && !failure_) {
    const std::span<const std::byte> unparsed = in_.unparsed();
    if (unparsed.size() < sizeof(FrameHeader)) break;
    const FrameHeader h = read_header(unparsed.data());
    if (!valid_kind(h.kind) || h.flags != 0 || h.length > limits_.max_message_bytes) {
      refuse_peer();
      break;
    }
    const size_t bytes = frame_bytes(h.length);
    if (unparsed.size() < bytes) break;
    const uint64_t cookie = in_.take(bytes);
    ++delivered;
    sink.on_frame(h, unparsed.subspan(sizeof(FrameHeader), h.length), cookie);
  }
  return delivered;
}

bool StreamLink::read_some() {
  // deliver() stopped at an incomplete frame and has checked its header if it arrived, so
  // its length is within the limit before a chunk of that size is made.
  const std::span<const std::byte> unparsed = in_.unparsed();
  const size_t wanted = unparsed.size() < sizeof(FrameHeader)
                            ? sizeof(FrameHeader)
                            : frame_bytes(read_header(unparsed.data()).length);
  const std::span<std::byte> space = in_.space_for(wanted);
  const size_t n = stream_->read(space);
  note_end();
  in_.filled(n);
  return n == space.size();  // a full read: more may wait
}

void StreamLink::release(Channel, uint64_t cookie) {
  in_.release(cookie);
}

std::error_code StreamLink::failure() const {
  if (failure_) return failure_;
  return has_input() ? std::error_code() : closed_;
}

bool StreamLink::has_input() const {
  // A truncated frame left at the end of the stream does not count: it is dropped.
  const std::span<const std::byte> unparsed = in_.unparsed();
  return (unparsed.size() >= sizeof(FrameHeader) &&
          unparsed.size() >= frame_bytes(read_header(unparsed.data()).length)) ||
         stream_->readable();
}

}  // namespace rdmakit::rpc::detail

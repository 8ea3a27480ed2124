// The ud:// byte stream: windowed sending, go-back-N retransmission, in-order taking and
// acknowledgements (see ud_stream.hpp).
#include "ud/ud_stream.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "rdmakit/error.hpp"
#include "rdmakit/rpc/status.hpp"

namespace rdmakit::rpc::detail::ud {
namespace {

// The first retransmission timeout, and its bound as it doubles. Long against a round trip
// of microseconds, so that a slow or descheduled peer is not flooded with copies.
constexpr Clock::duration kFirstTimeout = std::chrono::milliseconds(5);
constexpr Clock::duration kLongestTimeout = std::chrono::milliseconds(200);

}  // namespace

std::unique_ptr<UdStream> UdStream::open(std::shared_ptr<UdDevice> device,
                                         std::chrono::milliseconds silence,
                                         std::error_code& error) {
  try {
    auto stream = std::make_unique<UdStream>(std::move(device), silence);
    const std::optional<uint32_t> session = stream->device_->attach(stream.get(), error);
    if (!session) return nullptr;
    stream->session_ = *session;
    stream->attached_ = true;
    return stream;
  } catch (const Error& e) {
    error = e.code();
    return nullptr;
  }
}

UdStream::UdStream(std::shared_ptr<UdDevice> device, std::chrono::milliseconds silence)
    : device_(std::move(device)), silence_(silence), rto_(kFirstTimeout) {
  slot_bytes_ = static_cast<uint32_t>(sizeof(PacketHeader)) + device_->max_payload();
  window_ =
      RawRegion(device_->resources().pd, size_t{kPacketWindow} * slot_bytes_, Access::local_write);
  wait_fd_ = dup(device_->wake_fd());
  if (wait_fd_ < 0) throw_verbs_error("dup", errno, "the wake-up set of a ud:// session");
}

UdStream::~UdStream() {
  // A peer not told would retransmit what we never acknowledged until it gave up on us.
  shut_down();
  if (attached_) device_->detach(session_);
  for (const Arrived& a : arrived_) device_->repost(a.slot);
  close(wait_fd_);
}

void UdStream::connect(const Hello& peer) {
  QpAddress address;
  address.qpn = peer.qpn;
  address.qkey = peer.qkey;
  std::memcpy(address.gid.raw, peer.gid, sizeof peer.gid);
  peer_.emplace(device_->resources().context, device_->resources().pd, address);
  peer_session_ = peer.session;
  max_payload_ = std::min(device_->max_payload(), peer.max_payload);
}

std::byte* UdStream::slot_at(uint32_t seq) const noexcept {
  return window_.data() + size_t{seq % kPacketWindow} * slot_bytes_;
}

bool UdStream::post(uint32_t seq, bool retransmission) {
  SentSlot& s = sent_[seq % kPacketWindow];
  std::byte* at = slot_at(seq);
  // The acknowledgement is the newest at every post (a retransmission's too).
  const uint32_t ack = consumed();
  std::memcpy(at + offsetof(PacketHeader, ack), &ack, sizeof ack);
  uint64_t post = 0;
  if (!device_->send(*peer_, std::span<const std::byte>(at, s.bytes), window_.local().lkey(),
                     retransmission, post))
    return false;
  // A first post has been read once the peer acknowledges it; a retransmission's copy may
  // still wait in the send queue then, so its completion is followed.
  if (retransmission && post != 0) s.last_post = post;
  ack_told_ = ack;
  ack_due_ = false;
  return true;
}

size_t UdStream::write(std::span<const std::byte> bytes) {
  if (!peer_ || shut_ || ended_) return 0;
  size_t taken = 0;
  while (taken < bytes.size() && next_seq_ - acked_ < kPacketWindow) {
    SentSlot& s = sent_[next_seq_ % kPacketWindow];
    // A retransmitted copy of the slot's last datagram may still wait in the send queue.
    if (s.last_post > device_->sends_completed_through()) {
      device_->poll();
      if (s.last_post > device_->sends_completed_through()) break;
    }
    const auto n = static_cast<uint16_t>(std::min<size_t>(max_payload_, bytes.size() - taken));
    const PacketHeader h{peer_session_, next_seq_, 0, n, Kind::data, 0};
    std::byte* at = slot_at(next_seq_);
    std::memcpy(at, &h, sizeof h);
    std::memcpy(at + sizeof h, bytes.data() + taken, n);
    s.bytes = static_cast<uint32_t>(sizeof h) + n;
    if (!post(next_seq_, false)) break;
    if (next_seq_ == acked_) {
      now_ = Clock::now();
      last_progress_ = now_;
      retransmit_at_ = now_ + rto_;
    }
    ++next_seq_;
    taken += n;
  }
  return taken;
}

void UdStream::send_control(Kind kind) {
  const PacketHeader h{peer_session_, next_seq_, consumed(), 0, kind, 0};
  uint64_t post = 0;
  if (device_->send(*peer_, std::as_bytes(std::span(&h, 1)), 0, false, post)) {
    ack_told_ = h.ack;
    ack_due_ = false;
  }
}

void UdStream::progress() {
  if (!peer_) return;
  device_->poll();
  now_ = Clock::now();
  if (next_seq_ != acked_ && !ended_ && now_ >= retransmit_at_) {
    if (now_ - last_progress_ >= silence_) {
      ended_ = make_error_code(Errc::session_closed);  // nothing acknowledged for too long
      return;
    }
    for (uint32_t seq = acked_; seq != next_seq_; ++seq) {
      if (!post(seq, true)) break;  // the send queue is full: the rest at the next timeout
    }
    rto_ = std::min(2 * rto_, kLongestTimeout);
    retransmit_at_ = now_ + rto_;
  }
  const bool owed = ack_told_ != consumed();
  if ((ack_due_ || (owed && ack_owed_)) && !shut_) send_control(Kind::ack);
  ack_owed_ = ack_told_ != consumed();
}

bool UdStream::on_packet(const PacketHeader& h, std::span<const std::byte> data, uint32_t slot) {
  // An acknowledgement outside what we sent is stale (reordered) or bogus: ignored.
  if (!before(h.ack, acked_) && !before(next_seq_, h.ack) && h.ack != acked_) {
    acked_ = h.ack;
    // Not the time of the last progress(): packets are taken by any poll of the device, and
    // a stale time would shorten the next timeout or even declare the peer silent.
    now_ = Clock::now();
    last_progress_ = now_;
    rto_ = kFirstTimeout;
    retransmit_at_ = now_ + rto_;
  }
  switch (h.kind) {
    case Kind::data:
      if (h.seq == expected_ && !data.empty() && !peer_closed_) {
        arrived_.push_back({slot, data});
        ++expected_;
        return true;
      }
      ack_due_ = true;  // a duplicate or beyond a gap: tell the peer where we are
      return false;
    case Kind::closing:
      if (h.seq == expected_) peer_closed_ = true;
      return false;
    case Kind::ack:
      return false;
  }
  return false;  // an unknown kind
}

size_t UdStream::read(std::span<std::byte> space) {
  if (arrived_.empty()) device_->poll();
  size_t copied = 0;
  while (copied < space.size() && !arrived_.empty()) {
    Arrived& a = arrived_.front();
    const size_t n = std::min(space.size() - copied, a.data.size() - a.read);
    std::memcpy(space.data() + copied, a.data.data() + a.read, n);
    a.read += n;
    copied += n;
    if (a.read == a.data.size()) {
      device_->repost(a.slot);
      arrived_.pop_front();
    }
  }
  return copied;
}

std::error_code UdStream::ended() const {
  if (!arrived_.empty()) return {};
  if (peer_closed_ || shut_) return make_error_code(Errc::session_closed);
  return ended_;
}

void UdStream::shut_down() {
  if (peer_ && !shut_) send_control(Kind::closing);
  shut_ = true;
}

bool UdStream::readable() const {
  device_->poll();
  return !arrived_.empty();
}

void UdStream::set_sleeping(bool sleeping, bool /*output_waiting*/) {
  if (!sleeping) {
    device_->disarm();
    return;
  }
  // What we read is acknowledged before we sleep. Unacknowledged data needs its
  // retransmission; output the window holds back waits for acknowledgements, which arrive
  // as completions and wake us anyway.
  if (ack_told_ != consumed() && peer_ && !shut_) send_control(Kind::ack);
  std::optional<Clock::time_point> wake_at;
  if (next_seq_ != acked_) wake_at = retransmit_at_;
  device_->arm(wake_at);
}

size_t UdStream::memory_bytes() const noexcept {
  return window_.size() + size_t{kReservedPerSession} * device_->receive_slot_bytes();
}

}  // namespace rdmakit::rpc::detail::ud

// The UD transport's per-endpoint device: the queue pair, receive buffers, routing by
// session number, send accounting and sleeping (see ud_device.hpp).
#include "ud/ud_device.hpp"

#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/slot_receives.hpp"
#include "rdmakit/error.hpp"
#include "rdmakit/rpc/status.hpp"

namespace rdmakit::rpc::detail::ud {
namespace {

constexpr uint32_t kReceives = 4096;
constexpr uint32_t kSendDepth = 4096;
constexpr int kCompletionQueueDepth = kReceives + kSendDepth;
// Every datagram to a UD queue pair starts with the 40-byte GRH in its receive buffer.
constexpr uint32_t kGrhBytes = 40;
// Sends are signalled this often (and retransmissions always), so completions stay few.
constexpr uint32_t kSignalEvery = 64;
constexpr uint64_t kReceiveTag = uint64_t{1} << 63;
constexpr uint32_t kMostSessions = 1u << 16;  // the session number's low 16 bits

uint32_t mtu_bytes(ibv_mtu mtu) noexcept {
  return 128u << static_cast<int>(mtu);  // IBV_MTU_256 = 1
}

}  // namespace

std::shared_ptr<UdDevice> UdDevice::open(std::error_code& error) {
  try {
    ResourceOptions options;
    options.cq_depth = kCompletionQueueDepth;
    options.completion_channel = true;
    return std::make_shared<UdDevice>(Resources::open(options));
  } catch (const Error& e) {
    error = e.code();
    return nullptr;
  }
}

UdDevice::UdDevice(std::shared_ptr<Resources> resources) : resources_(std::move(resources)) {
  const Resources& r = *resources_;
  qp_ = QpBuilder(r.context, r.pd, r.cq)
            .type(QpType::ud)
            .send_depth(kSendDepth)
            .recv_depth(kReceives)
            .inline_size(64)
            .build();
  qp_.activate();
  send_depth_ = qp_.caps().send_depth;
  receives_ = qp_.caps().recv_depth;
  const uint32_t mtu = std::min<uint32_t>(mtu_bytes(r.context.port_info().active_mtu), 4096);
  slot_bytes_ = kGrhBytes + mtu;
  max_payload_ = mtu - static_cast<uint32_t>(sizeof(PacketHeader));
  receive_slots_ = RawRegion(r.pd, size_t{receives_} * slot_bytes_, Access::local_write);
  resources_->channel->set_nonblocking();
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  wake_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (timer_fd_ < 0 || wake_fd_ < 0) throw_verbs_error("timerfd/epoll", errno, "a ud:// endpoint");
  for (int fd : {resources_->channel->fd(), timer_fd_}) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = fd;
    epoll_ctl(wake_fd_, EPOLL_CTL_ADD, fd, &event);
  }
  if (const char* loss = std::getenv("RDMAKIT_UD_LOSS"))
    loss_ = std::clamp(std::atof(loss), 0.0, 0.5);
  std::vector<uint32_t> all(receives_);
  for (uint32_t i = 0; i < receives_; ++i) all[i] = i;
  post_receives(all);
}

UdDevice::~UdDevice() {
  disarm();  // events taken and acknowledged before the CQ goes
  close(wake_fd_);
  close(timer_fd_);
}

std::optional<uint32_t> UdDevice::attach(Receiver* receiver, std::error_code& error) {
  if ((admitted_ + 1) * kReservedPerSession > receives_ ||
      (free_entries_.empty() && sessions_.size() == kMostSessions)) {
    error = make_error_code(Errc::too_many_sessions);
    return std::nullopt;
  }
  uint32_t index;
  if (!free_entries_.empty()) {
    index = free_entries_.back();
    free_entries_.pop_back();
  } else {
    index = static_cast<uint32_t>(sessions_.size());
    sessions_.emplace_back();
  }
  Entry& e = sessions_[index];
  e.receiver = receiver;
  ++admitted_;
  return (uint32_t{e.generation} << 16) | index;
}

void UdDevice::detach(uint32_t session) noexcept {
  const uint32_t index = session & 0xffff;
  if (index >= sessions_.size() || sessions_[index].receiver == nullptr) return;
  Entry& e = sessions_[index];
  e.receiver = nullptr;
  ++e.generation;  // datagrams still addressed to the old number find nobody
  free_entries_.push_back(static_cast<uint16_t>(index));
  --admitted_;
}

bool UdDevice::dropped_by_fault_injection() {
  return loss_ > 0 && static_cast<double>(random_() - random_.min()) <
                          loss_ * static_cast<double>(random_.max() - random_.min());
}

bool UdDevice::send(const AddressHandle& to, std::span<const std::byte> packet, uint32_t lkey,
                    bool retransmission, uint64_t& post) {
  if (posted_ - completed_ + 1 >= send_depth_) {
    poll();
    if (posted_ - completed_ + 1 >= send_depth_) return false;
  }
  if (dropped_by_fault_injection()) {
    post = 0;  // lost on the way: nothing reads the buffer
    return true;
  }
  post = ++posted_;
  ibv_sge sge{reinterpret_cast<uintptr_t>(packet.data()), static_cast<uint32_t>(packet.size()),
              lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.ud.ah = to.get();
  wr.wr.ud.remote_qpn = to.remote_qpn();
  wr.wr.ud.remote_qkey = to.remote_qkey();
  if (packet.size() <= qp_.caps().inline_size) wr.send_flags |= IBV_SEND_INLINE;
  if (retransmission || ++unsignalled_ >= kSignalEvery) {
    wr.send_flags |= IBV_SEND_SIGNALED;
    wr.wr_id = posted_;
    unsignalled_ = 0;
  }
  if (qp_.post_send(wr)) {
    --posted_;
    return false;
  }
  return true;
}

void UdDevice::post_receives(std::span<const uint32_t> slots) {
  // Fewer receives: datagrams are lost, and retransmitted.
  post_slot_receives(slots, receive_slots_, slot_bytes_, kReceiveTag,
                     [&](ibv_recv_wr& first) { (void)qp_.post_recv(first); });
}

void UdDevice::repost(uint32_t slot) {
  to_repost_.push_back(slot);
  if (to_repost_.size() >= 32) {
    post_receives(to_repost_);
    to_repost_.clear();
  }
}

void UdDevice::poll() {
  std::array<ibv_wc, 32> wcs;
  for (;;) {
    const int n = resources_->cq.poll(wcs);
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[static_cast<size_t>(i)];
      if ((wc.wr_id & kReceiveTag) == 0) {
        completed_ = std::max(completed_, wc.wr_id);  // in order: everything before it too
        continue;
      }
      const auto slot = static_cast<uint32_t>(wc.wr_id & ~kReceiveTag);
      bool kept = false;
      const std::byte* at = receive_slots_.data() + size_t{slot} * slot_bytes_ + kGrhBytes;
      if (wc.status == IBV_WC_SUCCESS && wc.byte_len >= kGrhBytes + sizeof(PacketHeader)) {
        PacketHeader h;
        std::memcpy(&h, at, sizeof h);
        const size_t carried = wc.byte_len - kGrhBytes - sizeof h;
        const uint32_t index = h.session & 0xffff;
        if (h.bytes <= carried && index < sessions_.size() &&
            sessions_[index].receiver != nullptr && sessions_[index].generation == h.session >> 16)
          kept = sessions_[index].receiver->on_packet(
              h, std::span<const std::byte>(at + sizeof h, h.bytes), slot);
      }
      if (!kept) repost(slot);
    }
    if (n < static_cast<int>(wcs.size())) break;
  }
  if (!to_repost_.empty()) {
    post_receives(to_repost_);
    to_repost_.clear();
  }
}

void UdDevice::arm(std::optional<Clock::time_point> wake_at) {
  if (!armed_) {
    (void)resources_->cq.request_notify();
    armed_ = true;
  }
  if (wake_at && (!timer_at_ || *wake_at < *timer_at_)) {
    timer_at_ = wake_at;
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(wake_at->time_since_epoch()).count();
    itimerspec when{};
    when.it_value.tv_sec = std::max<int64_t>(ns, 1) / 1'000'000'000;
    when.it_value.tv_nsec = std::max<int64_t>(ns, 1) % 1'000'000'000;
    timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &when, nullptr);
  }
}

void UdDevice::disarm() {
  std::error_code ec;
  while (resources_->cq.take_event(ec)) {
  }
  armed_ = false;
  timer_at_.reset();
  itimerspec off{};
  timerfd_settime(timer_fd_, 0, &off, nullptr);
  uint64_t expirations = 0;
  (void)!read(timer_fd_, &expirations, sizeof expirations);
}

}  // namespace rdmakit::rpc::detail::ud

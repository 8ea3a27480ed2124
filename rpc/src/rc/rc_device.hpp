// One per endpoint for the RC transport: the device, its protection domain, the completion
// queue every queue pair of the endpoint shares (with a completion channel for sleeping),
// the shared receive queue they are all attached to, and the routing of completions to the
// links by QP number. Memory per peer stays small: receives are posted once per endpoint,
// not per connection.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <system_error>
#include <unordered_map>
#include <vector>

#include "rc/payload_pool.hpp"
#include "rdmakit/allocator.hpp"
#include "rdmakit/connection.hpp"

namespace rdmakit::rpc::detail::rc {

/// Bytes of each shared receive buffer: only hellos arrive by SEND (frames come by
/// WRITE_WITH_IMM, which uses a receive without its buffer).
inline constexpr size_t kReceiveSlotBytes = 64;
/// wr_ids of the shared receives carry this bit; the links' own work requests never do.
inline constexpr uint64_t kReceiveTag = uint64_t{1} << 63;

class RcDevice {
 public:
  /// What a link implements to get its completions.
  class Client {
   public:
    /// `sent` holds the bytes of a SEND that arrived (a hello), else it is empty.
    virtual void on_completion(const ibv_wc& wc, std::span<const std::byte> sent) = 0;

   protected:
    ~Client() = default;
  };

  /// Opens the device (RDMAKIT_DEVICE or the first active one). `for_rdma_cm`: the context
  /// RDMA CM hands out, for rc://; the TCP exchange (rc+tcp://) takes any.
  static std::shared_ptr<RcDevice> open(bool for_rdma_cm, std::error_code& error);
  explicit RcDevice(std::shared_ptr<Resources> resources);
  ~RcDevice();
  RcDevice(const RcDevice&) = delete;
  RcDevice& operator=(const RcDevice&) = delete;

  const std::shared_ptr<Resources>& resources() const noexcept { return resources_; }
  const ProtectionDomain& pd() const noexcept { return resources_->pd; }
  /// Registered buffers for out-of-line payloads, shared by the endpoint's sessions.
  PayloadPool& payloads() noexcept { return payloads_; }
  /// Connection options that attach the QP to the shared receive queue.
  ConnectionOptions connection_options(uint32_t send_depth) const;

  /// Routes the completions of QP `qpn` to `client`, starting with those that arrived
  /// before it was known.
  void attach(uint32_t qpn, Client* client);
  void detach(uint32_t qpn) noexcept;
  /// Takes every completion waiting and hands it to its link; reposts receives.
  void poll();

  /// Sleeping: the channel fires on the next completion (arm), events are taken (disarm).
  void arm();
  void disarm();
  int channel_fd() const noexcept { return resources_->channel->fd(); }

 private:
  struct Early {
    ibv_wc wc;
    std::array<std::byte, kReceiveSlotBytes> sent;
    size_t sent_bytes;
  };
  void post_receives(std::span<const uint32_t> slots);

  std::shared_ptr<Resources> resources_;
  std::shared_ptr<SharedReceiveQueue> srq_;
  RawRegion receive_slots_;
  PayloadPool payloads_;
  std::unordered_map<uint32_t, Client*> clients_;
  std::unordered_map<uint32_t, std::vector<Early>> early_;  // completions of QPs not attached yet
  std::vector<uint32_t> to_repost_;
  bool armed_ = false;
};

}  // namespace rdmakit::rpc::detail::rc

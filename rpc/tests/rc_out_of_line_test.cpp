// rc://'s out-of-line path, seen from inside the two session ends: the grant a large payload
// travels under is valid while the peer pulls it and fails a later RDMA READ once revoked
// (after the pull, or when the call timeout has passed), and the buffers on both sides go
// back to the endpoint's payload pool to be reused.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "loopback_pair.hpp"
#include "rc/rc_link.hpp"
#include "rdmakit/tcp_connection.hpp"

namespace rdmakit::rpc::detail::rc {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kRingBytes = 64 * 1024;
constexpr uint32_t kPayloadBytes = 1 << 20;  // far above a quarter ring: out of line

/// A connected pair of queue pairs from `owner`'s device (whose PD holds the grants) to a
/// separate reader process-alike with its own context: an outsider holding the grant's keys.
struct Connected {
  Connection owner_side;
  Connection reader_side;
};
Connected connect(const std::shared_ptr<Resources>& owner, const std::shared_ptr<Resources>& reader,
                  const ConnectionOptions& owner_options, const ConnectionOptions& reader_options) {
  TcpAcceptor acceptor(owner, "127.0.0.1", 0, owner_options);
  auto accepted = std::async(std::launch::async, [&] { return acceptor.accept(); });
  Connection reader_side =
      TcpConnector(reader, reader_options).connect("127.0.0.1", acceptor.port());
  return {accepted.get(), std::move(reader_side)};
}

struct Frame {
  FrameHeader header{};
  std::vector<std::byte> payload;
  uint64_t cookie = 0;
  bool arrived = false;
};
class Collect final : public FrameSink {
 public:
  Frame frame;
  void on_frame(const FrameHeader& header, std::span<const std::byte> payload,
                uint64_t cookie) override {
    frame = {header, {payload.begin(), payload.end()}, cookie, true};
  }
};

class RcOutOfLine : public ::testing::Test {
 protected:
  void SetUp() override {
    std::error_code ec;
    sender_device_ = RcDevice::open(false, ec);
    ASSERT_FALSE(ec) << ec.message();
    receiver_device_ = RcDevice::open(false, ec);
    ASSERT_FALSE(ec) << ec.message();
  }

  /// The two session ends; the sender's grants live for `grant_lifetime`.
  void open_links(std::chrono::milliseconds grant_lifetime) {
    RcLink::Setup setup;
    setup.limits = {8, 4 * kPayloadBytes};
    setup.ring_bytes = setup.peer_ring_bytes = kRingBytes;
    setup.grant_lifetime = grant_lifetime;
    Connected c =
        connect(sender_device_->resources(), receiver_device_->resources(),
                sender_device_->connection_options(64), receiver_device_->connection_options(64));
    std::error_code ec;
    sender_ = RcLink::open(sender_device_, std::move(c.owner_side), setup, ec);
    ASSERT_TRUE(sender_) << ec.message();
    receiver_ = RcLink::open(receiver_device_, std::move(c.reader_side), setup, ec);
    ASSERT_TRUE(receiver_) << ec.message();
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    ASSERT_TRUE(receiver_->await_peer(deadline));
    ASSERT_TRUE(sender_->await_peer(deadline));
  }

  /// Sends one out-of-line request of kPayloadBytes filled with `fill`.
  void send_request(std::byte fill) {
    FrameHeader h{};
    h.length = kPayloadBytes;
    h.kind = FrameKind::request;
    h.call_id = 1;
    std::byte* payload = sender_->begin(Channel::request, h);
    ASSERT_NE(payload, nullptr);
    std::memset(payload, static_cast<int>(fill), kPayloadBytes);
    sender_->commit(Channel::request);
    sender_->flush();
  }

  /// Polls the receiver until a frame arrives (bounded). The sender is not polled: it does
  /// not need to be for the pull, and does not learn of it.
  Frame receive() {
    Collect sink;
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!sink.frame.arrived && !receiver_->failure() &&
           std::chrono::steady_clock::now() < deadline) {
      receiver_->receive(sink, 1);
    }
    return sink.frame;
  }

  /// Polls the sender until its pool holds at least `bytes` idle (bounded).
  bool sender_pool_reaches(size_t bytes) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (sender_device_->payloads().idle_bytes() < bytes &&
           std::chrono::steady_clock::now() < deadline) {
      receiver_->flush();
      sender_->receive(ignored_, 1);
    }
    return sender_device_->payloads().idle_bytes() >= bytes;
  }

  /// An outsider on its own device with a QP into the sender's PD reads 8 bytes through
  /// the grant named in `header`.
  ibv_wc_status read_through_grant(const FrameHeader& header) {
    auto outsider = Resources::open();
    Connected c = connect(sender_device_->resources(), outsider, {}, {});
    RawRegion into(outsider->pd, 4096, Access::local_write);
    const RemoteBuffer grant(header.out_of_line, 8, header.out_of_line_tag);
    return testing::one_sided(c.reader_side.qp(), outsider->cq, IBV_WR_RDMA_READ,
                              into.local().first(8), grant);
  }

  class Ignore final : public FrameSink {
    void on_frame(const FrameHeader&, std::span<const std::byte>, uint64_t) override {}
  } ignored_;
  std::shared_ptr<RcDevice> sender_device_, receiver_device_;
  std::unique_ptr<RcLink> sender_, receiver_;
};

TEST_F(RcOutOfLine, TheGrantIsRevokedOnceThePayloadIsPulled) {
  open_links(30s);
  send_request(std::byte{0x5a});
  const Frame frame = receive();
  ASSERT_TRUE(frame.arrived);
  ASSERT_NE(frame.header.flags & kOutOfLine, 0);
  ASSERT_EQ(frame.payload.size(), kPayloadBytes);
  EXPECT_EQ(frame.payload.front(), std::byte{0x5a});
  EXPECT_EQ(frame.payload.back(), std::byte{0x5a});
  // Pulled, but the sender has not heard so yet: the grant still reads.
  EXPECT_EQ(read_through_grant(frame.header), IBV_WC_SUCCESS);
  // The receiver reports the pull; the sender revokes the grant, its buffer back in the pool.
  ASSERT_TRUE(sender_pool_reaches(kPayloadBytes));
  EXPECT_EQ(read_through_grant(frame.header), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(RcOutOfLine, AGrantExpiresWithTheCallTimeout) {
  open_links(1000ms);
  send_request(std::byte{1});
  const Frame frame = receive();  // pulled; the sender has not polled, so not yet revoked
  ASSERT_TRUE(frame.arrived);
  EXPECT_EQ(read_through_grant(frame.header), IBV_WC_SUCCESS);
  std::this_thread::sleep_for(1100ms);
  sender_->check_alive();  // the liveness check revokes what has expired
  EXPECT_EQ(read_through_grant(frame.header), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(RcOutOfLine, PayloadBuffersAreReusedOnBothSides) {
  open_links(30s);
  send_request(std::byte{2});
  Frame first = receive();
  ASSERT_TRUE(first.arrived);
  receiver_->release(Channel::request, first.cookie);
  EXPECT_GE(receiver_device_->payloads().idle_bytes(), kPayloadBytes);
  ASSERT_TRUE(sender_pool_reaches(kPayloadBytes));

  send_request(std::byte{3});
  // The sender took its pooled buffer again: the grant covers the same memory.
  EXPECT_EQ(sender_device_->payloads().idle_bytes(), 0u);
  Frame second = receive();
  ASSERT_TRUE(second.arrived);
  EXPECT_EQ(second.header.out_of_line, first.header.out_of_line);
  EXPECT_EQ(second.payload.front(), std::byte{3});
  EXPECT_EQ(receiver_device_->payloads().idle_bytes(), 0u);  // the pull reused it
  receiver_->release(Channel::request, second.cookie);
  EXPECT_GE(receiver_device_->payloads().idle_bytes(), kPayloadBytes);
}

}  // namespace
}  // namespace rdmakit::rpc::detail::rc

// A session over an ordered, reliable byte stream (byte_stream.hpp): a TCP connection or
// ud://'s datagram stream. Both channels share the stream, in commit order, as the same
// frames the ring transports carry, payloads always inline. Frames are built in a growing
// send buffer and handed to the stream by flush(); what the stream does not take stays for
// the next flush (or receive()). Arriving frames are validated (the peer may be buggy or
// hostile) and handed out where they were read, in receive chunks that stay until their
// frames are released (see receive_chunks.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <system_error>
#include <vector>

#include "core/link.hpp"
#include "stream/byte_stream.hpp"
#include "stream/receive_chunks.hpp"

namespace rdmakit::rpc::detail {

class StreamLink final : public Link {
 public:
  /// The stream's first bytes from the peer are its hello, of `bytes` bytes: nothing may be
  /// parsed before it, and `accept` says whether the peer speaks our protocol.
  struct AwaitedHello {
    size_t bytes = 0;  // 0: no hello (the transport checked the peer before)
    bool (*accept)(std::span<const std::byte> hello) = nullptr;
  };
  StreamLink(std::unique_ptr<ByteStream> stream, LinkLimits limits, AwaitedHello hello);
  StreamLink(const StreamLink&) = delete;
  StreamLink& operator=(const StreamLink&) = delete;

  std::byte* begin(Channel channel, FrameHeader& header) override;
  void commit(Channel channel) override;
  bool flush() override {
    send_pending();
    return false;  // the stream wakes the peer
  }
  int receive(FrameSink& sink, int budget) override;
  void release(Channel channel, uint64_t cookie) override;
  size_t reservation(uint32_t max_response) const override { return frame_bytes(max_response); }
  /// Not bounded: a reply's buffer grows as needed (the window bounds the total).
  size_t response_capacity() const override { return SIZE_MAX; }
  std::error_code failure() const override;
  /// receive() sees the stream end: nothing to add.
  void check_alive() override {}
  int wait_fd() const override { return stream_->wait_fd(); }
  void set_sleeping(bool sleeping) override {
    stream_->set_sleeping(sleeping, sent_ != committed_ && !closed_ && !failure_);
  }
  bool has_input() const override;
  void shut_down() override { stream_->shut_down(); }
  size_t memory_bytes() const noexcept override { return stream_->memory_bytes(); }

 private:
  void send_pending();
  /// The peer broke the protocol.
  void refuse_peer();
  bool read_hello();
  int deliver(FrameSink& sink, int budget);
  bool read_some();
  void note_end() {
    if (!closed_) closed_ = stream_->ended();
  }

  std::unique_ptr<ByteStream> stream_;
  AwaitedHello awaited_;
  std::vector<std::byte> hello_;
  size_t hello_missing_;  // bytes of the peer's hello not read yet
  std::vector<std::byte> out_;
  size_t sent_ = 0;       // out_[0, sent_) went out
  size_t committed_ = 0;  // out_[0, committed_) is complete frames
  ReceiveChunks in_;
  // The stream ended (EOF, reset, a silent peer): reported once the frames that arrived
  // before it are handed out.
  std::error_code closed_;
  std::error_code failure_;  // a protocol error: reported at once
};

}  // namespace rdmakit::rpc::detail

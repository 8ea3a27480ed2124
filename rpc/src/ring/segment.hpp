// The shared memory of one ring session (shm and inproc): a header with each ring's published
// and released positions, per ring a counter of released frames per out-of-line buffer slot
// (see out_of_line.hpp), then four rings, each mapped twice back to back so a frame that
// crosses the end of a ring is still contiguous in memory (no padding, no split).
//
//   ring(side, channel): side 0 = the connecting endpoint, 1 = the accepting one; each side
//   produces into a request ring and a response ring and consumes the other side's two.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <system_error>

#include "core/link.hpp"
#include "ring/out_of_line.hpp"

namespace rdmakit::rpc::detail {

struct alignas(64) SharedWord {
  std::atomic<uint64_t> value{0};
};
static_assert(sizeof(SharedWord) == 64,
              "one cache line per word: producer and consumer never share one");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "positions are shared between processes");
/// Frames released so far on one out-of-line buffer slot (written by the ring's consumer).
using SharedCounter = std::atomic<uint64_t>;

inline constexpr uint64_t kSegmentMagic = 0x31676e69722d6b72;  // "rk-ring1"
inline constexpr int kRings = 4;

struct SegmentHeader {
  uint64_t magic;
  uint32_t ring_bytes;
  uint32_t window;
  uint32_t max_message_bytes;
  uint32_t color;
  SharedWord tail[kRings];      // bytes published by the ring's producer
  SharedWord released[kRings];  // bytes released by the ring's consumer
  SharedWord sleeping[2];       // the endpoint of side s sleeps: signal it after a flush
  SharedWord closed[2];         // side s closed the session
};

constexpr int ring_index(int producer_side, Channel channel) noexcept {
  return producer_side * 2 + static_cast<int>(channel);
}

/// A mapped segment. Movable, unmaps on destruction.
class Segment {
 public:
  struct Layout {
    uint32_t ring_bytes;  // as round_ring_bytes() gives
    uint32_t window;
    uint32_t max_message_bytes;
    uint32_t color;  // below kColors: where the header sits and the rings start (see below)
  };
  /// Sessions of one endpoint advance in step; were their headers and ring positions at the
  /// same offsets in their pages, a server's hot lines would all fall in the same cache sets
  /// and thrash them from about a dozen sessions on. Each segment gets a color: its header
  /// is shifted by color x 128 bytes and its rings start at color x 128.
  static constexpr uint32_t kColors = 32;
  static uint32_t next_color() noexcept;
  /// The ring position every ring of a segment of this color starts at.
  static constexpr uint64_t start_position(uint32_t color) noexcept {
    return uint64_t{color} * 128;
  }
  /// Rounds ring_bytes up to a power of two of at least a page.
  static uint32_t round_ring_bytes(uint32_t bytes) noexcept;
  /// Creates an anonymous memory file holding a new segment, sealed against resizing, and
  /// maps it. `fd` receives the file (the caller passes or closes it).
  static Segment create(const Layout& layout, int& fd, std::error_code& error);
  /// Maps a segment received from a peer, after checking its size, seals and header.
  static Segment map(int fd, const Layout& expected, std::error_code& error);

  Segment() = default;
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  ~Segment();

  explicit operator bool() const noexcept { return base_ != nullptr; }
  SegmentHeader& header() const noexcept { return *reinterpret_cast<SegmentHeader*>(header_); }
  /// The first of the two mappings of ring `index`.
  std::byte* ring(int index) const noexcept;
  /// Ring `index`'s counters of released frames, one per out-of-line buffer slot.
  SharedCounter* released_counters(int index) const noexcept;
  uint32_t ring_bytes() const noexcept { return ring_bytes_; }
  /// The layout as checked when the segment was created or mapped: never re-read from the
  /// shared header, which the peer can write.
  const Layout& layout() const noexcept { return layout_; }

 private:
  static Segment map_file(int fd, const Layout& layout, std::error_code& error);
  std::byte* base_ = nullptr;
  std::byte* header_ = nullptr;
  size_t reserved_ = 0;
  uint32_t ring_bytes_ = 0;
  size_t front_bytes_ = 0;
  Layout layout_{};
  size_t slots_ = 0;
};

}  // namespace rdmakit::rpc::detail

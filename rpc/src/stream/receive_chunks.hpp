// The stream link's receive buffer. Bytes are read into chunks (64 KiB) and frames are handed
// out where they arrived, so a payload stays in place until it is released, however long
// the application holds it and whatever arrives meanwhile. Each chunk counts its frames not
// yet released; a frame that does not fit in the rest of the current chunk has its partial
// bytes moved to a fresh chunk (or to one of exactly its size when it is larger than a
// chunk). Released chunks are kept as spares, two at most.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace rdmakit::rpc::detail {

class ReceiveChunks {
 public:
  explicit ReceiveChunks(size_t chunk_bytes);

  /// The bytes read and not yet taken, contiguous.
  std::span<const std::byte> unparsed() const noexcept;
  /// Where to read next, such that the `frame_bytes` of the frame starting at unparsed()
  /// will be contiguous. Only called while that frame is incomplete, so never empty.
  std::span<std::byte> space_for(size_t frame_bytes);
  /// `bytes` were read into the start of space_for()'s span.
  void filled(size_t bytes) noexcept { filled_ += bytes; }
  /// The first `bytes` of unparsed() are a frame handed out: its bytes stay in place until
  /// release() with the cookie returned.
  uint64_t take(size_t bytes) noexcept;
  void release(uint64_t cookie);

 private:
  struct Chunk {
    std::unique_ptr<std::byte[]> memory;  // null: an unused entry of the table
    size_t capacity = 0;
    uint32_t unreleased = 0;  // frames taken from it, not yet released
  };

  uint32_t add_chunk(size_t capacity);
  void recycle(uint32_t index);

  size_t chunk_bytes_;
  std::vector<Chunk> chunks_;  // a cookie is an index into it
  std::vector<uint32_t> unused_entries_;
  std::vector<std::unique_ptr<std::byte[]>> spares_;  // of chunk_bytes_
  uint32_t current_ = 0;                              // the chunk read into
  size_t taken_ = 0;   // of the current chunk: bytes handed out as frames
  size_t filled_ = 0;  // of the current chunk: bytes read
};

}  // namespace rdmakit::rpc::detail

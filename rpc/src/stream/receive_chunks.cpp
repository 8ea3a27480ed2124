// The stream link's receive chunks: reading, handing out and recycling (see receive_chunks.hpp).
#include "stream/receive_chunks.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

namespace rdmakit::rpc::detail {
namespace {

// Released chunks kept for reuse; more would only hold memory after a burst.
constexpr size_t kMaxSpares = 2;

}  // namespace

ReceiveChunks::ReceiveChunks(size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {
  current_ = add_chunk(chunk_bytes_);
}

std::span<const std::byte> ReceiveChunks::unparsed() const noexcept {
  return {chunks_[current_].memory.get() + taken_, filled_ - taken_};
}

std::span<std::byte> ReceiveChunks::space_for(size_t frame_bytes) {
  if (taken_ + frame_bytes > chunks_[current_].capacity) {
    const size_t partial = filled_ - taken_;
    Chunk& current = chunks_[current_];
    if (current.unreleased == 0 && current.capacity == chunk_bytes_ &&
        frame_bytes <= chunk_bytes_) {
      // Nothing in this chunk is held: the partial frame slides to its start.
      std::memmove(current.memory.get(), current.memory.get() + taken_, partial);
    } else {
      const uint32_t next = add_chunk(std::max(frame_bytes, chunk_bytes_));
      std::memcpy(chunks_[next].memory.get(), chunks_[current_].memory.get() + taken_, partial);
      const uint32_t previous = std::exchange(current_, next);
      if (chunks_[previous].unreleased == 0) recycle(previous);
    }
    taken_ = 0;
    filled_ = partial;
  }
  Chunk& current = chunks_[current_];
  return {current.memory.get() + filled_, current.capacity - filled_};
}

uint64_t ReceiveChunks::take(size_t bytes) noexcept {
  taken_ += bytes;
  ++chunks_[current_].unreleased;
  return current_;
}

void ReceiveChunks::release(uint64_t cookie) {
  const auto index = static_cast<uint32_t>(cookie);
  Chunk& chunk = chunks_[index];
  if (--chunk.unreleased != 0) return;
  if (index != current_) {
    recycle(index);
  } else if (taken_ == filled_ && chunk.capacity == chunk_bytes_) {
    taken_ = filled_ = 0;  // empty: the next read starts at the beginning again
  }
}

uint32_t ReceiveChunks::add_chunk(size_t capacity) {
  std::unique_ptr<std::byte[]> memory;
  if (capacity == chunk_bytes_ && !spares_.empty()) {
    memory = std::move(spares_.back());
    spares_.pop_back();
  } else {
    memory = std::make_unique_for_overwrite<std::byte[]>(capacity);
  }
  if (unused_entries_.empty()) {
    unused_entries_.push_back(static_cast<uint32_t>(chunks_.size()));
    chunks_.emplace_back();
  }
  const uint32_t index = unused_entries_.back();
  unused_entries_.pop_back();
  chunks_[index] = Chunk{std::move(memory), capacity, 0};
  return index;
}

void ReceiveChunks::recycle(uint32_t index) {
  Chunk& chunk = chunks_[index];
  // Chunks of a single large frame are freed at once: a session keeps no large buffer idle.
  if (chunk.capacity == chunk_bytes_ && spares_.size() < kMaxSpares) {
    spares_.push_back(std::move(chunk.memory));
  }
  chunk = Chunk{};
  unused_entries_.push_back(index);
}

}  // namespace rdmakit::rpc::detail

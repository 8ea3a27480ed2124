// How `rdmakit kv` clients check every value they read. Each client thread is one writer
// (an id reserved from the server); every PUT writes fill_value(key, stamp) with a stamp of
// (writer, sequence number), and the thread remembers, per key, what it issued and what the
// server acknowledged. A GET's answer is accepted only if it is one the key may have had:
//  - its bytes are exactly a value of this key (kv_values), of the run's size;
//  - written by this thread: not older than this thread's last acknowledged write of the key
//    when the GET was issued (the server applies one session's writes in order), and not a
//    write it never issued;
//  - written by another thread of this process: one that thread issued (and with a single
//    client thread there is no other writer: such a value is wrong);
//  - "not found": only if a DELETE of the key was issued that may have taken effect.
// The checks assume this process is the only one writing to the server while it runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace rdmakit::tool::kv {

// What the threads of one client process share.
class Writers {
 public:
  Writers(uint32_t first, uint32_t count, uint64_t keys);
  uint32_t first() const noexcept { return first_; }
  uint32_t count() const noexcept { return count_; }
  // The last sequence number writer first()+index issued.
  std::atomic<uint64_t>& issued(uint32_t index) noexcept { return issued_[index]; }
  // Some thread issued a DELETE of `key`.
  std::atomic<bool>& deleted(uint64_t key) noexcept { return deleted_[key]; }

 private:
  uint32_t first_, count_;
  std::unique_ptr<std::atomic<uint64_t>[]> issued_;
  std::unique_ptr<std::atomic<bool>[]> deleted_;
};

class History {
 public:
  // The history of writer first()+index. `exclusive`: it is the only writer.
  History(Writers& writers, uint32_t index, uint64_t keys, uint32_t value_size);

  uint32_t writer() const noexcept { return writers_.first() + index_; }
  // Before a PUT or DELETE is issued: its stamp.
  uint64_t begin_write(uint64_t key, bool erase) noexcept;
  // After the server acknowledged it.
  void acknowledge(uint64_t key, uint64_t stamp, bool erase) noexcept;

  // Taken when a GET is issued; its answer is checked against it.
  struct Ticket {
    uint64_t acked;
  };
  Ticket begin_get(uint64_t key) const noexcept { return {keys_[key].acked}; }
  // nullptr when `value` (nullopt: not found) is an answer the key may legitimately give,
  // else why not.
  const char* check(uint64_t key, Ticket ticket,
                    std::optional<std::span<const std::byte>> value) const noexcept;

 private:
  struct KeyState {
    uint64_t acked = 0;    // seq << 1 | erased, of the newest acknowledged own write
    uint64_t issued = 0;   // seq of the newest own write issued
    uint64_t deleted = 0;  // seq of the newest own DELETE issued
  };
  Writers& writers_;
  uint32_t index_;
  uint32_t value_size_;
  bool exclusive_;
  uint64_t seq_ = 0;
  std::vector<KeyState> keys_;
};

}  // namespace rdmakit::tool::kv

// Access to registered memory: key, bounds, PD and access-right checks, pinning against a
// concurrent ibv_dereg_mr, and the copies into and out of another process.
#pragma once

#include <infiniband/verbs.h>
#include <sys/uio.h>
#include <cstddef>
#include <cstdint>

#include "common/process_identity.hpp"
#include "engine/payload_tail.hpp"
#include "engine/registry.hpp"

namespace softrdma {

/// Most SGEs a work request may carry (reported as max_sge).
constexpr int kMaxSge = 32;

/// Registered ranges, checked and pinned: ibv_dereg_mr waits until they are released.
class PinnedRanges {
 public:
  /// Ranges of this process's own regions need no pin: deregistering a region while
  /// posting from it is the application's own race, as with a NIC.
  enum class Pin { kYes, kOwnMemory };
  explicit PinnedRanges(Pin pin = Pin::kYes) : pin_(pin == Pin::kYes) {}
  ~PinnedRanges() { release(); }
  PinnedRanges(const PinnedRanges&) = delete;
  PinnedRanges& operator=(const PinnedRanges&) = delete;

  /// Checks that [addr, addr+length) lies in the region `key` of `owner` and `pd_id` with
  /// every bit of `access`, pins it and appends its host address. False if not allowed.
  /// `remote_qpn`: the access arrives at that QP, and `key` may name a memory window.
  bool add(uint32_t key, uint64_t addr, uint64_t length, const ProcessId& owner, uint32_t pd_id,
           uint32_t access, uint32_t remote_qpn = 0);
  void release();

  /// The ranges in the owner's address space.
  const iovec* iov() const { return iov_; }
  /// The same ranges mapped into this process; valid when all_mapped().
  const iovec* mapped() const { return mapped_; }
  bool all_mapped() const { return all_mapped_; }
  /// Every range is on shared pages, which every process of the host maps.
  bool on_shared_pages() const { return on_shared_pages_; }
  int count() const { return count_; }
  size_t total() const { return total_; }

 private:
  // Only the first count_ entries are ever read: left uninitialised, as zeroing them cost
  // more than a same-host 8-byte operation itself.
  EntryPins* pins_[kMaxSge];
  iovec iov_[kMaxSge];
  iovec mapped_[kMaxSge];
  bool all_mapped_ = true;
  bool on_shared_pages_ = true;
  bool pin_ = true;
  int count_ = 0;
  size_t total_ = 0;
};

/// The slot admits [addr, addr+length) of `owner`'s memory in `pd_id` with every bit of
/// `access`.
bool admits(const MrSlot& s, uint64_t addr, uint64_t length, const ProcessId& owner, uint32_t pd_id,
            uint32_t access);

/// Pins the region `s` describes under `key` (`pins`, Registry::mr_pins): true if the key is
/// still published once the pin is taken. ibv_dereg_mr and ibv_rereg_mr unpublish the key
/// and then wait for the pins to drain, so a pinned access never reaches a region that is
/// gone. Release with `pins.unpin()`.
bool pin_published(const MrSlot& s, EntryPins& pins, uint32_t key);

/// Where `addr` (admitted by `s`, a region of `owner`) is in this process: the owner's own
/// address, or the owner's pages mapped here. Null if it cannot be reached that way (a peer's
/// region outside shared pages: process_vm_* then; a hole in an own on-demand region).
char* map_region(const MrSlot& s, const ProcessId& owner, uint64_t addr, uint64_t length);

/// Pins a scatter/gather list owned by `owner`; zero-length entries are skipped.
bool pin_sge_list(PinnedRanges& out, const ibv_sge* sge, int num_sge, const ProcessId& owner,
                  uint32_t pd_id, uint32_t access);

/// Copies `src` (this process) into the pinned ranges of `owner`: plain copies when they
/// are mapped here, else process_vm_writev. 0 or an errno (ESRCH: owner gone).
int copy_into(const PinnedRanges& dst, const ProcessId& owner, const iovec* src, int count);
/// As copy_into, for a payload whose rest (after `src`) is still in its connection: `tail`
/// is read straight into the pinned ranges when they are mapped here. EFAULT if the tail
/// could not be read; then what it still holds is the caller's to drop.
int copy_into(const PinnedRanges& dst, const ProcessId& owner, const iovec* src, int count,
              PayloadTail* tail);
/// Copies the pinned ranges of `owner` into `dst` (this process).
int copy_out_of(const PinnedRanges& src, const ProcessId& owner, const iovec* dst, int count);

/// Copies `local` (this process) into `remote` (memory of `target`). 0 or an errno
/// (ESRCH: target gone; EFAULT: bad address).
int copy_to_process(const ProcessId& target, const iovec* local, int nlocal, const iovec* remote,
                    int nremote);
/// Copies `remote` (memory of `target`) into `local`.
int copy_from_process(const ProcessId& target, const iovec* local, int nlocal, const iovec* remote,
                      int nremote);

}  // namespace softrdma

// Registered memory that peers on the host can map. At registration, a page-aligned range
// of private anonymous memory is moved, contents and address unchanged, onto a memfd
// mapped MAP_SHARED at the same place. Peers then map that memfd and reach the region
// with plain loads and stores, at memory speed and without a system call, as a NIC's DMA
// would. Memory that cannot be moved (not page-aligned, file-backed, already shared)
// stays as it is and is reached with process_vm_readv/writev.
//
// When the last registration of a range goes, its pages move back to private anonymous
// memory (contents and address unchanged; a write to the range by another thread during
// ibv_dereg_mr itself may be lost): memory that is no longer registered behaves as
// any other again (a later fork() copies it; a later mapping at the same address is new
// memory). While registered, a fork()ed child shares the pages with its parent instead of
// copying them (as with ibv_fork_init on a NIC, registered memory is not the child's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "common/process_identity.hpp"

namespace softrdma {

struct SharedPages {
  int fd;           // memfd holding the region's pages, as numbered in the owner
  uint64_t serial;  // which memfd: the owner reuses a closed memfd's number for a new one
  uint64_t offset;  // of the region's first byte in the memfd
};

/// Makes [addr, addr+length) mappable by peers, if it can be done safely.
std::optional<SharedPages> share_pages(void* addr, size_t length);

/// Ends one registration's use of pages share_pages() moved (same addr and length).
void unshare_pages(void* addr, size_t length);

/// The memfd `fd` (with `serial`) of `owner`, mapped into this process, or nullptr. `bytes`
/// covers offset + length of the region being accessed. Mappings are cached per fd number;
/// one of a memfd the owner has closed is unmapped when the number names a new one.
char* map_peer_pages(const ProcessId& owner, int fd, uint64_t serial, uint64_t bytes);

}  // namespace softrdma

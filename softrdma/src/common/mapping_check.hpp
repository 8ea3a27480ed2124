// Whether a range of this process's address space is mapped with the rights a registration
// needs: what pinning the pages would check on a NIC.
#pragma once

#include <cstdint>

namespace softrdma {

// True if every byte of [start, end) is mapped readable, and writable when `need_write`.
bool mapped_with_access(uintptr_t start, uintptr_t end, bool need_write);

}  // namespace softrdma

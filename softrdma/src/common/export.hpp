// Marks a function as part of the C ABI that softrdma exports. Everything else is hidden
// (-fvisibility=hidden plus the generated version script with `local: *`).
#pragma once

#define SOFTRDMA_EXPORT extern "C" __attribute__((visibility("default")))

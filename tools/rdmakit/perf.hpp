// `rdmakit perf`: perftest's tests on the rdmakit library.
#pragma once

#include "perf_options.hpp"

namespace rdmakit::tool {

// Runs the server or the client side of the test. Throws PerfError (or rdmakit::Error) on
// failure, with a message naming the cause.
void run_perf(const PerfOptions& options);

}  // namespace rdmakit::tool

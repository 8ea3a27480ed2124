// `rdmakit devices`: the RDMA devices, their ports and GID tables, the GID the library
// would choose on each port (with its reason), and with -v each port's hardware counters.
#pragma once

namespace CLI {
class App;
}

namespace rdmakit::tool {

struct DevicesOptions {
  bool json = false;
  bool verbose = false;  // each port's counters too
};

void add_devices_options(CLI::App& devices, DevicesOptions& options);
// Prints the list. Throws rdmakit::Error if the verbs library fails.
void run_devices(const DevicesOptions& options);

}  // namespace rdmakit::tool

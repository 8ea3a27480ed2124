// `rdmakit devices`: the RDMA devices, their ports and GID tables, and the GID the library
// would choose on each port (with its reason).
#pragma once

namespace CLI {
class App;
}

namespace rdmakit::tool {

struct DevicesOptions {
  bool json = false;
};

void add_devices_options(CLI::App& devices, DevicesOptions& options);
// Prints the list. Throws rdmakit::Error if the verbs library fails.
void run_devices(const DevicesOptions& options);

}  // namespace rdmakit::tool

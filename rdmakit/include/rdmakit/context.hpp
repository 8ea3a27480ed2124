// An open device, the port used on it and the GID chosen on that port.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "rdmakit/device.hpp"

namespace rdmakit {

/// What Context::open says (and the tools print) when the system lists no RDMA device at all.
inline constexpr const char* kNoDeviceHint =
    "no RDMA device found; run it under softrdma-run to use the software device";

/// Which device, port and GID Context::open() takes.
struct OpenOptions {
  /// Device name; empty means RDMAKIT_DEVICE ("name" or "name:port") or else the first device
  /// with an active port.
  std::string device;
  /// Port number; 0 means the one named in RDMAKIT_DEVICE or else the first active port.
  uint8_t port = 0;
  /// GID index; unset means RDMAKIT_GID_INDEX or else the automatic choice (select_gid).
  std::optional<int> gid_index;
};

/// An open RDMA device with its chosen port and GID; move-only. Objects made on it keep
/// the device open.
class Context {
 public:
  /// Opens a device. Throws Error naming the device when none matches or it cannot be opened.
  static Context open(const OpenOptions& options = {});
  /// Wraps a context that someone else owns (e.g. the one RDMA CM hands out).
  static Context borrow(ibv_context* context, uint8_t port, std::optional<int> gid_index = {});

  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  /// Takes over the device.
  Context(Context&&) noexcept = default;
  /// Releases this device, then takes over the other.
  Context& operator=(Context&&) noexcept = default;

  /// The verbs context.
  ibv_context* get() const;
  /// The device's name.
  const std::string& name() const;
  /// The port in use.
  uint8_t port() const;
  /// The GID in use, and why it was chosen.
  const GidChoice& gid() const;
  /// The device's attributes (ibv_query_device).
  const ibv_device_attr& attributes() const;
  /// The port's state, MTU and GID table.
  const PortInfo& port_info() const;

  /// Shared ownership used by the objects created on this context: the device is closed only
  /// when the last of them is gone, whatever order the user destroys them in.
  const std::shared_ptr<ibv_context>& handle() const;

  struct State;  ///< private to context.cpp

 private:
  explicit Context(std::shared_ptr<State> state) : state_(std::move(state)) {}
  const State& state() const;
  std::shared_ptr<State> state_;
};

}  // namespace rdmakit

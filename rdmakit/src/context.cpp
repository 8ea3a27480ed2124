#include "rdmakit/context.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "device_list.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit {

struct Context::State {
  std::shared_ptr<ibv_context> handle;
  std::string name;
  uint8_t port = 0;
  GidChoice gid;
  ibv_device_attr attr{};
  PortInfo port_info;
};

namespace {

// RDMAKIT_DEVICE is "name" or "name:port".
void apply_environment(OpenOptions& options) {
  const char* env = std::getenv("RDMAKIT_DEVICE");
  if (!options.device.empty() || !env || !*env) return;
  std::string_view value(env);
  const auto colon = value.find(':');
  options.device = std::string(value.substr(0, colon));
  if (colon != std::string_view::npos && options.port == 0)
    options.port = static_cast<uint8_t>(std::atoi(env + colon + 1));
}

uint8_t first_active_port(ibv_context* ctx, const ibv_device_attr& attr) {
  for (uint8_t p = 1; p <= attr.phys_port_cnt; ++p) {
    ibv_port_attr port{};
    if (ibv_query_port(ctx, p, &port) == 0 && port.state == IBV_PORT_ACTIVE) return p;
  }
  return 0;
}

std::shared_ptr<Context::State> make_state(std::shared_ptr<ibv_context> handle, uint8_t port,
                                           std::optional<int> gid_index) {
  auto state = std::make_shared<Context::State>();
  state->handle = std::move(handle);
  state->name = ibv_get_device_name(state->handle->device);
  if (int err = ibv_query_device(state->handle.get(), &state->attr))
    throw_verbs_error("ibv_query_device", err, state->name);
  if (port == 0) port = first_active_port(state->handle.get(), state->attr);
  if (port == 0 || port > state->attr.phys_port_cnt)
    throw Error(verbs_error(ENODEV), state->name + ": no active port");
  state->port = port;
  state->port_info = query_port(state->handle.get(), port);
  state->gid = select_gid(state->handle.get(), port, gid_index);
  return state;
}

}  // namespace

Context Context::open(const OpenOptions& requested) {
  OpenOptions options = requested;
  apply_environment(options);
  const detail::DeviceList list;
  std::string tried;
  for (ibv_device* device : list.devices()) {
    const char* name = ibv_get_device_name(device);
    if (!options.device.empty() && options.device != name) continue;
    ibv_context* raw = ibv_open_device(device);
    if (!raw) throw_verbs_error("ibv_open_device", errno, name);
    std::shared_ptr<ibv_context> handle(raw, [](ibv_context* c) { ibv_close_device(c); });
    if (!options.device.empty())
      return Context(make_state(handle, options.port, options.gid_index));
    ibv_device_attr attr{};
    if (ibv_query_device(raw, &attr) == 0 && first_active_port(raw, attr) != 0)
      return Context(make_state(handle, options.port, options.gid_index));
    tried += tried.empty() ? name : std::string(", ") + name;
  }
  if (!options.device.empty())
    throw Error(verbs_error(ENODEV), "no RDMA device named " + options.device);
  throw Error(verbs_error(ENODEV), tried.empty() ? std::string(kNoDeviceHint)
                                                 : "no device with an active port (" + tried + ")");
}

Context Context::borrow(ibv_context* context, uint8_t port, std::optional<int> gid_index) {
  RDMAKIT_REQUIRE(context != nullptr, "Context::borrow of a null ibv_context");
  return Context(
      make_state(std::shared_ptr<ibv_context>(context, [](ibv_context*) {}), port, gid_index));
}

const Context::State& Context::state() const {
  RDMAKIT_REQUIRE(state_ != nullptr, "use of a moved-from rdmakit::Context");
  return *state_;
}

ibv_context* Context::get() const {
  return state().handle.get();
}
const std::string& Context::name() const {
  return state().name;
}
uint8_t Context::port() const {
  return state().port;
}
const GidChoice& Context::gid() const {
  return state().gid;
}
const ibv_device_attr& Context::attributes() const {
  return state().attr;
}
const PortInfo& Context::port_info() const {
  return state().port_info;
}
const std::shared_ptr<ibv_context>& Context::handle() const {
  return state().handle;
}

}  // namespace rdmakit

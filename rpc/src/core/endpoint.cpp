// The public endpoint, server and client: thin forwards to the engine, and the choice of a
// transport by URL.
#include <cstring>
#include <utility>

#include "core/engine.hpp"
#include "core/transports.hpp"
#include "rdmakit/error.hpp"
#include "rdmakit/rpc/client.hpp"
#include "rdmakit/rpc/server.hpp"

namespace rdmakit::rpc {
namespace detail {

const Transport* transport_for(std::string_view url, std::string& address) noexcept {
  static const Transport inproc{listen_inproc, connect_inproc};
  static const Transport shm{listen_shm, connect_shm};
  static const Transport tcp{listen_tcp, connect_tcp};
  static const Transport rc{listen_rc, connect_rc};
  static const Transport rc_tcp{listen_rc_tcp, connect_rc_tcp};
  static const Transport ud{listen_ud, connect_ud};

  const size_t sep = url.find("://");
  if (sep == std::string_view::npos || sep + 3 == url.size()) return nullptr;
  const std::string_view scheme = url.substr(0, sep);
  address.assign(url.substr(sep + 3));
  if (scheme == "inproc") return &inproc;
  if (scheme == "shm") return &shm;
  if (scheme == "tcp") return &tcp;
  if (scheme == "rc") return &rc;
  if (scheme == "rc+tcp") return &rc_tcp;
  if (scheme == "ud") return &ud;

  return nullptr;
}

}  // namespace detail

Endpoint::Endpoint(std::unique_ptr<detail::Engine> engine) noexcept : engine_(std::move(engine)) {}
Endpoint::Endpoint(Endpoint&&) noexcept = default;
Endpoint& Endpoint::operator=(Endpoint&&) noexcept = default;
Endpoint::~Endpoint() = default;

int Endpoint::poll(OnResponse on_response) {
  return engine_->poll(&on_response);
}
int Endpoint::poll() {
  return engine_->poll(nullptr);
}
int Endpoint::wait(std::chrono::microseconds timeout, OnResponse on_response) {
  return engine_->wait(timeout, &on_response);
}
int Endpoint::wait(std::chrono::microseconds timeout) {
  return engine_->wait(timeout, nullptr);
}
void Endpoint::on_response(std::function<void(const Response&)> callback) {
  engine_->set_default_callback(std::move(callback));
}
std::optional<RecvHandle> Endpoint::recv() noexcept {
  return engine_->recv();
}
void Endpoint::handle(uint32_t method, std::function<void(RecvHandle)> handler) {
  engine_->handle(method, std::move(handler));
}

CallResult Endpoint::call(SessionId session, std::span<const std::byte> request, uint64_t user_data,
                          const CallOptions& options) {
  return engine_->call(session, request.size(), detail::copying(request), user_data, options,
                       nullptr);
}
CallResult Endpoint::call_with(SessionId session, size_t size, Fill fill, uint64_t user_data,
                               const CallOptions& options) {
  return engine_->call(session, size, fill, user_data, options, nullptr);
}
CallAwaitable Endpoint::call(SessionId session, std::span<const std::byte> request,
                             const CallOptions& options) noexcept {
  return CallAwaitable(engine_.get(), session, request, options);
}
bool Endpoint::cancel(CallId id) noexcept {
  return engine_->cancel(id);
}

std::error_code Endpoint::reply(RequestToken&& token, std::span<const std::byte> response) {
  RDMAKIT_REQUIRE(token, "rpc: reply with an empty RequestToken");
  return RecvHandle(token.held_.release()).reply(response);
}
std::error_code Endpoint::reply_with(RequestToken&& token, size_t size, Fill fill) {
  RDMAKIT_REQUIRE(token, "rpc: reply with an empty RequestToken");
  return RecvHandle(token.held_.release()).reply_with(size, fill);
}
std::error_code Endpoint::reply_error(RequestToken&& token, Code code, std::string_view message) {
  RDMAKIT_REQUIRE(token, "rpc: reply with an empty RequestToken");
  return RecvHandle(token.held_.release()).reply_error(code, message);
}

SessionId Endpoint::open_session(std::string_view url, std::error_code& error) {
  error.clear();
  std::string address;
  const detail::Transport* transport = detail::transport_for(url, address);
  if (transport == nullptr) {
    error = make_error_code(Errc::bad_url);
    return {};
  }
  std::unique_ptr<detail::Link> link = transport->connect(address, *engine_, error);
  if (!link) return {};
  return engine_->add_session(std::move(link));
}

SessionId Endpoint::open_session(std::string_view url) {
  std::error_code error;
  const SessionId session = open_session(url, error);
  if (error) throw_error(error, "rpc::Endpoint::open_session(" + std::string(url) + ")");
  return session;
}

size_t Endpoint::session_memory_bytes() const noexcept {
  return engine_->session_memory_bytes();
}
size_t Endpoint::session_count() const noexcept {
  return engine_->session_count();
}
bool Endpoint::is_open(SessionId session) const noexcept {
  const detail::Session* s = engine_->find(session);
  return s != nullptr && s->open && !s->close_requested;
}
void Endpoint::close(SessionId session) noexcept {
  engine_->request_close(session);
}
uint32_t Endpoint::in_flight(SessionId session) const noexcept {
  const detail::Session* s = engine_->find(session);
  return s != nullptr ? s->calls.in_use() : 0;
}
const Options& Endpoint::options() const noexcept {
  return engine_->options();
}

std::optional<Server> Server::listen(std::string_view url, const Options& options,
                                     std::error_code& error) {
  error.clear();
  std::string address;
  const detail::Transport* transport = detail::transport_for(url, address);
  if (transport == nullptr) {
    error = make_error_code(Errc::bad_url);
    return std::nullopt;
  }
  auto engine = std::make_unique<detail::Engine>(options);
  std::unique_ptr<detail::Listener> listener = transport->listen(address, *engine, error);
  if (!listener) return std::nullopt;
  engine->set_listener(std::move(listener));
  return Server(std::move(engine));
}

Server Server::listen(std::string_view url, const Options& options) {
  std::error_code error;
  std::optional<Server> server = listen(url, options, error);
  if (!server) throw_error(error, "rpc::Server::listen(" + std::string(url) + ")");
  return std::move(*server);
}

const std::string& Server::url() const noexcept {
  return engine().url();
}

Client::Client(std::unique_ptr<detail::Engine> engine, SessionId session) noexcept
    : Endpoint(std::move(engine)), session_(session) {}

std::optional<Client> Client::connect(std::string_view url, const Options& options,
                                      std::error_code& error) {
  Client client(std::make_unique<detail::Engine>(options), SessionId{});
  client.session_ = client.open_session(url, error);
  if (error) return std::nullopt;
  return client;
}

Client Client::connect(std::string_view url, const Options& options) {
  std::error_code error;
  std::optional<Client> client = connect(url, options, error);
  if (!client) throw_error(error, "rpc::Client::connect(" + std::string(url) + ")");
  return std::move(*client);
}

}  // namespace rdmakit::rpc

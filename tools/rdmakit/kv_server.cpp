#include "kv_server.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace rdmakit::tool::kv {
namespace {

using namespace std::chrono_literals;

// RDMA connections kept at once; the oldest goes when another client connects.
constexpr size_t kMaxConnections = 256;
// A grant lasts what the client asks for, within these bounds.
constexpr uint32_t kMinGrantSeconds = 10;
constexpr uint32_t kMaxGrantSeconds = 24 * 3600;

rpc::Options server_options(rpc::Mode mode) {
  rpc::Options o;
  o.mode = mode;
  o.window = 4096;           // admits clients of any depth up to it
  o.queue_unhandled = true;  // every method comes to recv(): unknown ones get our error
  return o;
}

std::shared_ptr<Resources> open_device() {
  ResourceOptions o;
  return Resources::open(o);
}

}  // namespace

Server::Server(const ServerConfig& config)
    : config_(config),
      limits_{config.keys, config.value_capacity},
      resources_(open_device()),
      memory_(resources_->pd, TableLayout::for_keys(config.keys, config.value_capacity).bytes(),
              Access::local_write),
      table_(std::span(memory_.data(), memory_.size()),
             TableLayout::for_keys(config.keys, config.value_capacity)),
      grants_(resources_->pd, Access::remote_read),
      acceptor_(resources_, "0.0.0.0", config.rdma_port),
      rpc_(rpc::Server::listen(config.url, server_options(config.mode))),
      acceptor_thread_([this] { accept_loop(); }) {}

Server::~Server() {
  stopping_ = true;
  acceptor_thread_.join();
}

void Server::accept_loop() {
  while (!stopping_.load(std::memory_order_relaxed)) {
    std::error_code error;
    Connection c = acceptor_.accept_for(100ms, error);
    if (error) {
      if (error != Errc::timed_out) {
        std::fprintf(stderr, "rdmakit kv server: RDMA connection refused: %s\n",
                     acceptor_.explanation().c_str());
        std::this_thread::sleep_for(10ms);
      }
      continue;
    }
    std::lock_guard lock(mutex_);
    connections_.push_back(std::move(c));
    if (connections_.size() > kMaxConnections) connections_.pop_front();
  }
}

void Server::serve(const std::atomic<bool>& stop) {
  auto next_sweep = std::chrono::steady_clock::now();
  while (!stop.load(std::memory_order_relaxed)) {
    if (config_.mode == rpc::Mode::blocking) {
      rpc_.wait(50ms);
    } else {
      for (int i = 0; i < 64; ++i) rpc_.poll();
    }
    while (std::optional<rpc::RecvHandle> request = rpc_.recv()) answer(std::move(*request));
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_sweep) {
      grants_.revoke_expired();
      next_sweep = now + 1s;
    }
  }
}

void Server::answer(rpc::RecvHandle h) {
  const Decoded d = decode_request(h.method(), h.data(), limits_);
  if (!d.ok()) {
    ++counters_.refused;
    std::move(h).reply_error(d.code, d.error);
    return;
  }
  ++counters_.served;
  const Request& r = d.request;
  switch (r.op) {
    case Op::get: {
      const std::optional<std::span<const std::byte>> value = table_.get(r.key);
      if (!value) {
        std::move(h).reply_error(rpc::Code::not_found);
      } else if (value->size() > h.max_response()) {
        std::move(h).reply_error(rpc::Code::resource_exhausted,
                                 "the value is larger than the reply space reserved");
      } else {
        std::move(h).reply(*value);
      }
      return;
    }
    case Op::put:
      if (table_.put(r.key, r.value) == KvTable::PutResult::full) {
        std::move(h).reply_error(rpc::Code::resource_exhausted, "the table is full");
      } else {
        std::move(h).reply({});
      }
      return;
    case Op::erase: {
      const std::byte existed{static_cast<uint8_t>(table_.erase(r.key) ? 1 : 0)};
      std::move(h).reply(std::span(&existed, 1));
      return;
    }
    case Op::describe:
      describe(std::move(h), r);
      return;
  }
}

void Server::describe(rpc::RecvHandle h, const Request& r) {
  TableInfo info;
  info.keys = config_.keys;
  info.value_capacity = table_.layout().value_capacity;
  info.slot_bytes = table_.layout().slot_bytes;
  info.slots = table_.layout().slots;
  info.first_writer = next_writer_;
  next_writer_ += std::max<uint32_t>(r.writers, 1);
  if (r.grant_seconds != 0) {
    const uint32_t seconds = std::clamp(r.grant_seconds, kMinGrantSeconds, kMaxGrantSeconds);
    std::error_code error;
    const Grant grant = grants_.grant(memory_.local().first(table_.layout().bytes()),
                                      Access::remote_read, std::chrono::seconds(seconds), error);
    if (error) {
      std::move(h).reply_error(rpc::Code::internal, "granting the table failed");
      return;
    }
    info.table = grant.remote;
    info.rdma_port = acceptor_.port();
  }
  const auto bytes = encode_table_info(info);
  std::move(h).reply(bytes);
}

}  // namespace rdmakit::tool::kv

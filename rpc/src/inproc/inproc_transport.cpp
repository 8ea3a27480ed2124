// inproc://NAME: sessions between threads of one process. The rings are the same as shm's
// (a memory file mapped by both sides, see ring/), found through a process-wide registry of
// listeners; payloads too large for a ring travel as heap blocks handed over by pointer,
// which the receiver checks against the session's table of blocks in flight.
#include <unistd.h>

#include <mutex>
#include <optional>
#include <unordered_map>

#include "core/engine.hpp"
#include "core/transports.hpp"
#include "ring/ring_link.hpp"

namespace rdmakit::rpc::detail {
namespace {

// What the two sides of one session share: each side's session index in its endpoint (for
// the peer's ready marks), and the heap blocks of out-of-line payloads announced by either
// side, which the receiving side adopts (a reference) so that a block outlives its sender.
class Shared {
 public:
  static constexpr uint32_t kUnknown = UINT32_MAX;
  std::atomic<uint32_t> index[2] = {kUnknown, kUnknown};

  struct Block {
    std::shared_ptr<std::byte[]> memory;
    size_t bytes = 0;
  };
  std::byte* create(size_t bytes) {
    Block block{std::shared_ptr<std::byte[]>(new std::byte[bytes]), bytes};
    std::byte* data = block.memory.get();
    std::lock_guard lock(mutex_);
    blocks_.emplace(data, std::move(block));
    return data;
  }
  void destroy(const std::byte* data) {
    std::lock_guard lock(mutex_);
    blocks_.erase(data);
  }
  /// The block at `data`, if one was created there and holds at least `bytes`.
  std::optional<Block> find(const std::byte* data, size_t bytes) {
    std::lock_guard lock(mutex_);
    auto it = blocks_.find(data);
    if (it == blocks_.end() || it->second.bytes < bytes) return std::nullopt;
    return it->second;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<const std::byte*, Block> blocks_;
};

class InprocPeer final : public RingPeer {
 public:
  InprocPeer(std::shared_ptr<Doorbell> peer_doorbell, std::shared_ptr<Shared> shared, int side)
      : peer_doorbell_(std::move(peer_doorbell)), shared_(std::move(shared)), side_(side) {}

  void published(bool peer_sleeping) override {
    // An index not yet known, or marks not read yet: the peer's engine scans the session.
    const uint32_t peer = shared_->index[1 - side_].load(std::memory_order_seq_cst);
    if (peer != Shared::kUnknown && peer_doorbell_->wants_marks()) peer_doorbell_->mark_ready(peer);
    if (peer_sleeping) peer_doorbell_->ring();
  }
  bool attach(uint32_t index) override {
    shared_->index[side_].store(index, std::memory_order_seq_cst);
    return index < Doorbell::kReadySessions;
  }
  std::error_code check_alive() override { return {}; }  // the segment's closed flag tells
  int wait_fd() const override { return -1; }            // the engine's doorbell wakes us
  std::byte* create_buffer(size_t bytes, uint64_t& handle) override {
    std::byte* data = shared_->create(bytes);
    handle = reinterpret_cast<uint64_t>(data);
    return data;
  }
  void destroy_buffer(std::byte* data, size_t, uint64_t) override { shared_->destroy(data); }
  bool announce_buffer(uint64_t, uint32_t) override { return true; }  // the handle is enough
  std::span<const std::byte> adopt_buffer(uint32_t, uint64_t handle, size_t min_bytes) override {
    std::optional<Shared::Block> block =
        shared_->find(reinterpret_cast<const std::byte*>(handle), min_bytes);
    if (!block) return {};
    const std::span<const std::byte> data(block->memory.get(), block->bytes);
    adopted_.emplace(data.data(), std::move(block->memory));
    return data;
  }
  void drop_buffer(std::span<const std::byte> buffer) override { adopted_.erase(buffer.data()); }

 private:
  std::shared_ptr<Doorbell> peer_doorbell_;
  std::shared_ptr<Shared> shared_;
  int side_;
  std::unordered_map<const std::byte*, std::shared_ptr<std::byte[]>> adopted_;
};

class InprocListener;
std::mutex registry_mutex;
std::unordered_map<std::string, InprocListener*>& registry() {
  static auto* listeners = new std::unordered_map<std::string, InprocListener*>();
  return *listeners;
}

class InprocListener final : public Listener {
 public:
  InprocListener(std::string name, Engine& engine)
      : name_(std::move(name)),
        url_("inproc://" + name_),
        engine_doorbell_(engine.doorbell()),
        options_(engine.options()) {}
  ~InprocListener() override {
    std::lock_guard lock(registry_mutex);
    registry().erase(name_);
  }

  std::unique_ptr<Link> accept() override {
    arrivals_.clear();  // before looking: a ring after the look wakes the next wait
    if (!has_pending_.load(std::memory_order_acquire)) return nullptr;
    std::lock_guard lock(mutex_);
    if (pending_.empty()) return nullptr;
    std::unique_ptr<Link> link = std::move(pending_.back());
    pending_.pop_back();
    has_pending_.store(!pending_.empty(), std::memory_order_release);
    return link;
  }
  int wait_fd() const override { return arrivals_.fd(); }
  const std::string& url() const override { return url_; }

  // Called by connecting threads, under registry_mutex.
  std::unique_ptr<Link> connect(Engine& client, std::error_code& error) {
    const Segment::Layout layout{
        Segment::round_ring_bytes(std::min(options_.ring_bytes, client.options().ring_bytes)),
        std::min(options_.window, client.options().window),
        std::min(options_.max_message_bytes, client.options().max_message_bytes),
        Segment::next_color()};
    int fd = -1;
    Segment mine = Segment::create(layout, fd, error);
    if (!mine) return nullptr;
    Segment theirs = Segment::map(fd, layout, error);
    close(fd);
    if (!theirs) return nullptr;
    auto shared = std::make_shared<Shared>();
    auto server_side = std::make_unique<RingLink>(
        std::move(theirs), 1, std::make_unique<InprocPeer>(client.doorbell(), shared, 1));
    auto client_side = std::make_unique<RingLink>(
        std::move(mine), 0, std::make_unique<InprocPeer>(engine_doorbell_, shared, 0));
    {
      std::lock_guard lock(mutex_);
      pending_.insert(pending_.begin(), std::move(server_side));
      has_pending_.store(true, std::memory_order_release);
    }
    arrivals_.ring();
    return client_side;
  }

 private:
  std::string name_;
  std::string url_;
  std::shared_ptr<Doorbell> engine_doorbell_;
  Options options_;
  Doorbell arrivals_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Link>> pending_;  // newest first
  std::atomic<bool> has_pending_{false};
};

}  // namespace

std::unique_ptr<Listener> listen_inproc(const std::string& name, Engine& engine,
                                        std::error_code& error) {
  std::lock_guard lock(registry_mutex);
  if (registry().contains(name)) {
    error = std::make_error_code(std::errc::address_in_use);
    return nullptr;
  }
  auto listener = std::make_unique<InprocListener>(name, engine);
  registry()[name] = listener.get();
  return listener;
}

std::unique_ptr<Link> connect_inproc(const std::string& name, Engine& engine,
                                     std::error_code& error) {
  std::lock_guard lock(registry_mutex);
  auto it = registry().find(name);
  if (it == registry().end()) {
    error = make_error_code(Errc::not_listening);
    return nullptr;
  }
  return it->second->connect(engine, error);
}

}  // namespace rdmakit::rpc::detail

#include "kv_client.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kv_table.hpp"
#include "kv_values.hpp"
#include "rdmakit/allocator.hpp"
#include "rdmakit/async_queue_pair.hpp"
#include "rdmakit/poller.hpp"
#include "rdmakit/rpc/client.hpp"
#include "rdmakit/task.hpp"
#include "rdmakit/tcp_connection.hpp"
#include "rpc_connect.hpp"

namespace rdmakit::tool::kv {
namespace {

using namespace std::chrono_literals;

constexpr auto kCallTimeout = 10s;  // a server that stops answering fails the run
constexpr auto kReadTimeout = std::chrono::nanoseconds(10s);
constexpr uint32_t kMaxTornReads = 100'000;  // copies of one slot before giving up

rpc::Options client_options(uint32_t depth, uint32_t value_capacity, rpc::Mode mode) {
  rpc::Options o;
  o.mode = mode;
  o.window = depth;
  // Every call reserves a whole value's reply: room for all of them, and as much again.
  const uint64_t want = uint64_t{2} * depth * (value_capacity + 256);
  o.ring_bytes =
      static_cast<uint32_t>(std::bit_ceil(std::clamp<uint64_t>(want, 256u << 10, 1u << 30)));
  o.default_timeout = kCallTimeout;
  return o;
}

// The RDMA side of a --one-sided client: its own device resources, one RC connection to the
// server, and a scratch slot per coroutine that READs land in.
struct OneSided {
  OneSided(const std::string& host, const TableInfo& info, uint32_t depth)
      : resources(Resources::open()),
        connection(TcpConnector(resources).connect(host, info.rdma_port)),
        scratch(resources->pd, size_t{depth} * info.slot_bytes, Access::local_write),
        poller(resources->cq),
        qp(poller, connection.qp()) {}

  std::shared_ptr<Resources> resources;
  Connection connection;
  RawRegion scratch;
  Poller poller;
  AsyncQueuePair qp;
};

class ClientThread {
 public:
  ClientThread(ClientPlan& plan, uint32_t index, ClientStats& stats)
      : plan_(plan),
        o_(*plan.options),
        index_(index),
        stats_(stats),
        layout_{plan.info.slots, plan.info.slot_bytes, plan.info.value_capacity},
        client_(connect_retrying(plan.url,
                                 client_options(o_.depth, plan.info.value_capacity, o_.mode))),
        history_(*plan.writers, index, o_.keys, o_.value_size),
        workload_(*plan.keys, o_.read_ratio, o_.delete_ratio, o_.seed * 7919 + index) {
    if (o_.one_sided) one_sided_ = std::make_unique<OneSided>(plan.rdma_host, plan.info, o_.depth);
  }

  void run();

 private:
  void pump() {
    client_.poll();
    if (one_sided_) one_sided_->poller.poll();
  }
  Task<void> preload_worker();
  Task<void> worker(uint32_t slot);
  Task<bool> get_rpc(uint64_t key);
  Task<bool> get_one_sided(uint64_t key, uint32_t slot);
  Task<bool> put(uint64_t key, std::vector<std::byte>& request, bool preload = false);
  Task<bool> erase(uint64_t key);

  bool verify(uint64_t key, History::Ticket ticket,
              std::optional<std::span<const std::byte>> value);
  bool fail(const std::string& what);
  bool failed_call(const char* op, const rpc::Status& status) {
    return fail(std::string(op) + " failed: " + std::string(rpc::code_name(status.code)) +
                (status.message.empty() ? "" : ": " + std::string(status.message)));
  }

  ClientPlan& plan_;
  const KvOptions& o_;
  uint32_t index_;
  ClientStats& stats_;
  TableLayout layout_;
  rpc::Client client_;
  History history_;
  Workload workload_;
  std::unique_ptr<OneSided> one_sided_;
  uint32_t running_ = 0;
  uint64_t next_preload_;
  bool stopping_ = false;
};

bool ClientThread::fail(const std::string& what) {
  if (stats_.failed++ == 0 && stats_.first_error.empty()) stats_.first_error = what;
  plan_.abort = true;
  stopping_ = true;
  return false;
}

bool ClientThread::verify(uint64_t key, History::Ticket ticket,
                          std::optional<std::span<const std::byte>> value) {
  ++(value ? stats_.found : stats_.not_found);
  if (const char* why = history_.check(key, ticket, value)) {
    if (stats_.wrong++ == 0 && stats_.first_error.empty())
      stats_.first_error = "GET of key " + std::to_string(key) + " returned " + why;
  }
  return true;
}

Task<bool> ClientThread::get_rpc(uint64_t key) {
  const std::array<std::byte, kKeyBytes> request = encode_key(key);
  rpc::CallOptions call;
  call.method = kGet;
  call.max_response = plan_.info.value_capacity;
  const History::Ticket ticket = history_.begin_get(key);
  ++stats_.gets;
  const rpc::Response r = co_await client_.call(request, call);
  if (r.status.code == rpc::Code::not_found) co_return verify(key, ticket, std::nullopt);
  if (!r.status.ok()) co_return failed_call("GET", r.status);
  co_return verify(key, ticket, r.data);
}

// Probes as the server placed the key: its home slot, then the next ones until the key or an
// empty slot. A copy overlapped by a write (torn) is read again.
Task<bool> ClientThread::get_one_sided(uint64_t key, uint32_t slot) {
  const uint32_t slot_bytes = layout_.slot_bytes;
  const LocalBuffer scratch =
      one_sided_->scratch.local().subspan(size_t{slot} * slot_bytes, slot_bytes);
  const RemoteBuffer table = plan_.info.table;
  const History::Ticket ticket = history_.begin_get(key);
  ++stats_.gets;
  const uint64_t mask = layout_.slots - 1;
  uint64_t index = home_slot(key, layout_.slots);
  uint32_t torn = 0;
  for (uint64_t probes = 0; probes < layout_.slots;) {
    const std::error_code error = co_await one_sided_->qp.read(
        scratch, table.subspan(index * slot_bytes, slot_bytes), OpOptions{kReadTimeout, nullptr});
    ++stats_.probes;
    if (error) co_return fail("RDMA READ failed: " + error.message());
    const SlotView view = inspect_slot(scratch.bytes(), layout_);
    if (view.kind == SlotView::Kind::torn) {
      ++stats_.torn_reads;
      if (++torn > kMaxTornReads) co_return fail("a slot was never read whole");
      continue;
    }
    if (view.kind == SlotView::Kind::corrupt) {
      ++stats_.wrong;
      if (stats_.first_error.empty()) stats_.first_error = "a slot the server never wrote";
      co_return true;
    }
    if (view.kind == SlotView::Kind::empty) co_return verify(key, ticket, std::nullopt);
    if (view.kind == SlotView::Kind::used && view.key == key)
      co_return verify(key, ticket, view.value);
    torn = 0;
    ++probes;
    index = (index + 1) & mask;
  }
  co_return verify(key, ticket, std::nullopt);
}

Task<bool> ClientThread::put(uint64_t key, std::vector<std::byte>& request, bool preload) {
  const uint64_t stamp = history_.begin_write(key, false);
  encode_put_header(request, key, o_.value_size);
  fill_value(key, stamp, std::span(request).subspan(kPutHeaderBytes));
  rpc::CallOptions call;
  call.method = kPut;
  call.max_response = 128;
  ++(preload ? stats_.preloaded : stats_.puts);
  const rpc::Response r = co_await client_.call(request, call);
  if (!r.status.ok()) co_return failed_call("PUT", r.status);
  history_.acknowledge(key, stamp, false);
  co_return true;
}

Task<bool> ClientThread::erase(uint64_t key) {
  const uint64_t stamp = history_.begin_write(key, true);
  const std::array<std::byte, kKeyBytes> request = encode_key(key);
  rpc::CallOptions call;
  call.method = kDelete;
  call.max_response = 128;
  ++stats_.deletes;
  const rpc::Response r = co_await client_.call(request, call);
  if (!r.status.ok()) co_return failed_call("DELETE", r.status);
  if (r.data.size() != 1)
    co_return fail("DELETE: a reply of " + std::to_string(r.data.size()) + " bytes instead of 1");
  history_.acknowledge(key, stamp, true);
  co_return true;
}

// This thread's share of the keys: index, index + clients, ...
Task<void> ClientThread::preload_worker() {
  std::vector<std::byte> request(put_bytes(o_.value_size));
  while (!stopping_ && next_preload_ < o_.keys) {
    const uint64_t key = next_preload_;
    next_preload_ += o_.clients;
    co_await put(key, request, true);
  }
  --running_;
}

Task<void> ClientThread::worker(uint32_t slot) {
  std::vector<std::byte> request(put_bytes(o_.value_size));
  while (!stopping_) {
    const KvOp op = workload_.next();
    const Clock::time_point start = Clock::now();
    bool done = false;
    switch (op.kind) {
      case OpKind::get:
        if (one_sided_)
          done = co_await get_one_sided(op.key, slot);
        else
          done = co_await get_rpc(op.key);
        break;
      case OpKind::put:
        done = co_await put(op.key, request);
        break;
      case OpKind::erase:
        done = co_await erase(op.key);
        break;
    }
    if (done && !stopping_) {
      const Clock::time_point end = Clock::now();
      ++stats_.measurement.ops;
      stats_.measurement.latencies_usec.push_back(
          std::chrono::duration<double, std::micro>(end - start).count());
    }
  }
  --running_;
}

void ClientThread::run() {
  next_preload_ = index_;
  running_ = o_.depth;
  for (uint32_t w = 0; w < o_.depth; ++w) spawn(preload_worker());
  while (running_ > 0) pump();
  plan_.preloaded.fetch_add(1);
  while (plan_.preloaded.load() < o_.clients && !plan_.abort.load()) {
    pump();
    std::this_thread::sleep_for(100us);
  }
  if (plan_.abort.load()) return;

  const double seconds = o_.duration > 0 ? o_.duration : 2.0;
  stats_.measurement.latencies_usec.reserve(1u << 20);
  stats_.measurement.start = Clock::now();
  const Clock::time_point until =
      stats_.measurement.start +
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  running_ = o_.depth;
  for (uint32_t w = 0; w < o_.depth; ++w) spawn(worker(w));
  stats_.measurement.end = until;
  bool ended = false;
  while (running_ > 0) {
    pump();
    if (!ended) {
      const Clock::time_point now = Clock::now();
      if (now >= until || stopping_ || plan_.abort.load(std::memory_order_relaxed)) {
        stopping_ = ended = true;
        stats_.measurement.end = now;
      }
    }
  }
}

}  // namespace

TableInfo describe(const std::string& url, uint32_t grant_seconds, uint32_t writers) {
  rpc::Client client = connect_retrying(url, client_options(1, 4096, rpc::Mode::busy_poll));
  const std::array<std::byte, kDescribeBytes> request = encode_describe(grant_seconds, writers);
  rpc::CallOptions call;
  call.method = kDescribe;
  call.max_response = 256;
  std::optional<TableInfo> info;
  std::string error;
  bool done = false;
  const rpc::CallResult issued = client.call(request, 0, call);
  if (!issued.ok()) throw std::runtime_error("DESCRIBE: " + issued.error.message());
  while (!done) {
    client.wait(10ms, [&](const rpc::Response& r) {
      done = true;
      if (!r.status.ok()) {
        error = std::string(rpc::code_name(r.status.code)) + " " + std::string(r.status.message);
      } else if (!(info = decode_table_info(r.data))) {
        error = "a malformed reply";
      }
    });
  }
  if (!info) throw std::runtime_error("DESCRIBE of " + url + " failed: " + error);
  const TableLayout expected = TableLayout::with_slots(info->slots, info->value_capacity);
  if (expected.slots != info->slots || expected.slot_bytes != info->slot_bytes ||
      (grant_seconds != 0 && info->table.size() != expected.bytes()))
    throw std::runtime_error("the server's table has a layout this client does not know");
  return *info;
}

void run_client(ClientPlan& plan, uint32_t index, ClientStats& stats) {
  try {
    ClientThread thread(plan, index, stats);
    thread.run();
  } catch (...) {
    plan.abort = true;
    throw;
  }
}

}  // namespace rdmakit::tool::kv

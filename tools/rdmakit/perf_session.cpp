#include "perf_session.hpp"

#include <algorithm>

#include "bounded.hpp"
#include "rdmakit/cm_connection.hpp"
#include "rdmakit/tcp_connection.hpp"

namespace rdmakit::tool {
namespace {

// Control messages in flight per QP at most: GO or DONE, and one spare.
constexpr uint32_t kControlSends = 2;
constexpr uint32_t kSendTestReceives = 512;  // perftest's receive depth
constexpr uint32_t kControlReceives = 8;
// Per QP after the slots: the control receive area, then the control send area.
constexpr uint64_t kControlArea = 2 * kControlBytes;

bool is_send_test(const PerfOptions& o) {
  return o.test_info().verb == Verb::send;
}

// Slots hold the largest message and at least a control message (send tests receive both
// there); 64-byte aligned so atomics land on aligned words.
uint64_t stride_of(const PerfOptions& o) {
  const uint64_t largest = std::max<uint64_t>(o.sizes().back(), kControlBytes);
  return (largest + 63) / 64 * 64;
}

ResourceOptions resource_options(const PerfOptions& o, size_t qps) {
  ResourceOptions r;
  r.device.device = o.device;
  r.device.port = static_cast<uint8_t>(o.ib_port);
  if (o.gid_index >= 0) r.device.gid_index = o.gid_index;
  r.for_rdma_cm = o.rdma_cm;
  // Every send and receive of every QP may complete before the thread polls.
  r.cq_depth = static_cast<int>(qps * (o.tx_depth + kControlSends + receive_depth(o)) + 64);
  return r;
}

ConnectionOptions connection_options(const PerfOptions& o, std::vector<std::byte> hello) {
  ConnectionOptions c;
  c.caps.send_depth = o.tx_depth + kControlSends;
  c.caps.recv_depth = receive_depth(o);
  c.user_data = std::move(hello);
  c.timeout = std::min<std::chrono::milliseconds>(o.timeout(), std::chrono::seconds(10));
  return c;
}

// Memory of `count` QPs: their slots, then their control areas.
Worker make_worker(const PerfOptions& o, size_t count) {
  Worker w;
  w.resources = Resources::open(resource_options(o, count));
  w.region = RawRegion(w.resources->pd, count * (stride_of(o) + kControlArea), Access::all);
  w.peers.resize(count);
  return w;
}

void place(const PerfOptions& o, Worker& w, size_t local, Peer& p) {
  const uint64_t stride = stride_of(o);
  const LocalBuffer all = w.region.local();
  const LocalBuffer control = all.subspan(w.peers.size() * stride + local * kControlArea);
  p.slot = all.subspan(local * stride, stride);
  p.recv_buf = is_send_test(o) ? p.slot : control.first(kControlBytes);
  p.ctrl_out = control.subspan(kControlBytes, kControlBytes);
}

template <typename AcceptorT>
void accept_all(AcceptorT& acceptor, const PerfOptions& o, Worker& w) {
  std::vector<bool> taken(o.qps, false);
  for (uint32_t n = 0; n < o.qps; ++n) {
    std::error_code ec;
    Connection c = acceptor.accept_for(o.timeout(), ec);
    if (ec)
      throw PerfError("waiting for the client's QP " + std::to_string(n) + " of " +
                      std::to_string(o.qps) + ": " + acceptor.explanation());
    const std::optional<ClientHello> hello = decode_client_hello(c.peer_data());
    if (!hello) throw PerfError("the peer is not an `rdmakit perf` client");
    if (hello->qps != o.qps)
      throw PerfError("the client runs " + std::to_string(hello->qps) + " QPs and this server " +
                      std::to_string(o.qps) + ": use the same -q");
    if (hello->index >= o.qps || taken[hello->index])
      throw PerfError("protocol error: the client sent QP index " + std::to_string(hello->index));
    taken[hello->index] = true;
    Peer& p = w.peers[hello->index];
    p.connection = std::move(c);
    p.index = hello->index;
    p.remote = hello->slot;
    place(o, w, hello->index, p);
  }
}

// The settings both sides must share, compared field by field.
void check_server(const PerfOptions& o, const ServerHello& s) {
  const auto sizes = o.sizes();
  std::string differs;
  if (s.test != o.test)
    differs = std::string("runs ") + info(s.test).name + ", this client " + o.test_info().name;
  else if (s.qps != o.qps)
    differs = "runs " + std::to_string(s.qps) + " QPs, this client " + std::to_string(o.qps);
  else if (s.iters != o.iters)
    differs =
        "runs " + std::to_string(s.iters) + " iterations, this client " + std::to_string(o.iters);
  else if (s.min_size != sizes.front() || s.max_size != sizes.back())
    differs = "runs sizes " + std::to_string(s.min_size) + ".." + std::to_string(s.max_size) +
              ", this client " + std::to_string(sizes.front()) + ".." +
              std::to_string(sizes.back());
  if (!differs.empty())
    throw PerfError("the server " + differs + ": start both sides with the same test and flags");
  if (s.stride != stride_of(o)) throw PerfError("protocol error: the server's slots differ");
}

template <typename ConnectorT>
Connection connect_one(const PerfOptions& o, Worker& w, size_t local, uint32_t index) {
  Peer& p = w.peers[local];
  place(o, w, local, p);
  ClientHello hello{w.region.remote().subspan(local * stride_of(o), stride_of(o)),
                    static_cast<uint16_t>(index), static_cast<uint16_t>(o.qps)};
  ConnectorT connector(w.resources, connection_options(o, encode(hello)));
  std::error_code ec;
  Connection c = connector.connect(o.host, o.port, ec);
  if (ec)
    throw PerfError("connecting QP " + std::to_string(index) + " to " + o.host + ":" +
                    std::to_string(o.port) + ": " + connector.explanation());
  return c;
}

}  // namespace

uint32_t receive_depth(const PerfOptions& o) {
  return is_send_test(o) ? std::max(kSendTestReceives, o.tx_depth) : kControlReceives;
}

const char* take_message(Peer& peer, uint32_t imm, std::span<const std::byte> payload) {
  std::optional<Message> m = to_message(imm, payload);
  if (!m) return "protocol error: an unknown control message";
  // The protocol is lockstep: the next message only comes once this one was answered.
  if (peer.message) return "protocol error: a control message arrived before the last was taken";
  peer.message = *m;
  return nullptr;
}

Worker accept_peers(const PerfOptions& o) {
  Worker w = make_worker(o, o.qps);
  const auto sizes = o.sizes();
  const ServerHello hello{o.test,
                          o.qps,
                          o.iters,
                          sizes.front(),
                          sizes.back(),
                          stride_of(o),
                          w.region.remote().first(o.qps * stride_of(o))};
  const ConnectionOptions options = connection_options(o, encode(hello));
  if (o.rdma_cm) {
    CmAcceptor acceptor(w.resources, "0.0.0.0", o.port, options);
    accept_all(acceptor, o, w);
  } else {
    TcpAcceptor acceptor(w.resources, "0.0.0.0", o.port, options);
    accept_all(acceptor, o, w);
  }
  return w;
}

std::vector<Worker> connect_peers(const PerfOptions& o) {
  std::vector<Worker> workers;
  for (uint32_t t = 0; t < o.threads; ++t)
    workers.push_back(make_worker(o, (o.qps - t + o.threads - 1) / o.threads));
  for (uint32_t i = 0; i < o.qps; ++i) {
    Worker& w = workers[i % o.threads];
    const size_t local = i / o.threads;
    Connection c = o.rdma_cm ? connect_one<CmConnector>(o, w, local, i)
                             : connect_one<TcpConnector>(o, w, local, i);
    const std::optional<ServerHello> hello = decode_server_hello(c.peer_data());
    if (!hello) throw PerfError("the peer is not an `rdmakit perf` server");
    check_server(o, *hello);
    Peer& p = w.peers[local];
    p.connection = std::move(c);
    p.index = i;
    p.remote = hello->slots.subspan(i * hello->stride, hello->stride);
  }
  return workers;
}

}  // namespace rdmakit::tool

// The classic RDMA client/server workflow, with raw verbs and the RDMA connection manager.
//
//   server: listen, accept a client, allocate and register a buffer, send its address and
//           key to the client, wait for the client to disconnect.
//   client: connect, receive the buffer's address and key, run timed loops of RDMA WRITE
//           and RDMA READ against it, check the data, print bandwidth and latency,
//           disconnect.
//
// Usage: rdma_client_server --server [--port P]
//        rdma_client_server --client HOST [--port P] [--size BYTES] [--iters N]
// It runs unchanged on a NIC (rdma-core) or on softrdma (build/softrdma-run ...).
#include <infiniband/verbs.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "rdma_client_server: %s failed: %s\n", what, std::strerror(errno));
  std::exit(1);
}

void check(int rc, const char* what) {
  if (rc) {
    if (rc > 0) errno = rc;
    die(what);
  }
}

template <typename T>
T* check(T* p, const char* what) {
  if (!p) die(what);
  return p;
}

// What the server tells the client about its buffer.
struct BufferInfo {
  uint64_t addr;
  uint32_t rkey;
  uint32_t length;
};

constexpr uint32_t kServerBuffer = 1 << 20;

// Page-aligned, page-multiple buffers: registered memory a software device can share with
// its peers (and what a NIC pins in whole pages anyway).
struct PageBuffer {
  explicit PageBuffer(size_t bytes)
      : size((bytes + 4095) & ~size_t{4095}),
        data(static_cast<char*>(std::aligned_alloc(4096, size))) {
    if (!data) die("aligned_alloc");
    std::memset(data, 0, size);
  }
  ~PageBuffer() { std::free(data); }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  size_t size;
  char* data;
};

struct Options {
  bool server = false;
  std::string host;
  std::string port = "20886";
  uint32_t size = 4096;
  int iters = 10000;
};

// Waits for the next CM event, which must be `expected`.
rdma_cm_event* expect(rdma_event_channel* channel, rdma_cm_event_type expected) {
  rdma_cm_event* event = nullptr;
  check(rdma_get_cm_event(channel, &event), "rdma_get_cm_event");
  if (event->event != expected) {
    std::fprintf(stderr, "rdma_client_server: expected %s, got %s (status %d)\n",
                 rdma_event_str(expected), rdma_event_str(event->event), event->status);
    std::exit(1);
  }
  return event;
}

// One signalled work request at a time: post it and wait for its completion.
void post_and_wait(ibv_qp* qp, ibv_cq* cq, ibv_send_wr& wr) {
  ibv_send_wr* bad = nullptr;
  check(ibv_post_send(qp, &wr, &bad), "ibv_post_send");
  ibv_wc wc{};
  int n;
  while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
  }
  if (n < 0 || wc.status != IBV_WC_SUCCESS) {
    std::fprintf(stderr, "rdma_client_server: work completion failed: %s\n",
                 ibv_wc_status_str(wc.status));
    std::exit(1);
  }
}

void wait_recv(ibv_cq* cq) {
  ibv_wc wc{};
  while (ibv_poll_cq(cq, 1, &wc) == 0) {
  }
  if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV) {
    std::fprintf(stderr, "rdma_client_server: receive failed: %s\n", ibv_wc_status_str(wc.status));
    std::exit(1);
  }
}

// Per-connection resources: a PD, one CQ for both directions, and an RC QP on the id.
struct Resources {
  ibv_pd* pd;
  ibv_cq* cq;
};

Resources setup_qp(rdma_cm_id* id) {
  Resources r{};
  r.pd = check(ibv_alloc_pd(id->verbs), "ibv_alloc_pd");
  r.cq = check(ibv_create_cq(id->verbs, 64, nullptr, nullptr, 0), "ibv_create_cq");
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = r.cq;
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 32;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  check(rdma_create_qp(id, r.pd, &attr), "rdma_create_qp");
  return r;
}

void teardown(rdma_cm_id* id, Resources& r) {
  rdma_destroy_qp(id);
  ibv_destroy_cq(r.cq);
  ibv_dealloc_pd(r.pd);
}

int run_server(const Options& o) {
  rdma_event_channel* channel = check(rdma_create_event_channel(), "rdma_create_event_channel");
  rdma_cm_id* listener = nullptr;
  check(rdma_create_id(channel, &listener, nullptr, RDMA_PS_TCP), "rdma_create_id");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(o.port)));
  check(rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&addr)), "rdma_bind_addr");
  check(rdma_listen(listener, 1), "rdma_listen");
  std::printf("server: listening on port %s\n", o.port.c_str());

  // S.1-S.2: a client arrives; give it a QP and accept.
  rdma_cm_event* request = expect(channel, RDMA_CM_EVENT_CONNECT_REQUEST);
  rdma_cm_id* client = request->id;
  rdma_ack_cm_event(request);
  Resources r = setup_qp(client);
  check(rdma_accept(client, nullptr), "rdma_accept");
  rdma_ack_cm_event(expect(channel, RDMA_CM_EVENT_ESTABLISHED));
  std::printf("server: client connected\n");

  // S.3: the buffer the client reads and writes, registered for remote access. Big enough
  // for any --size a client is likely to use.
  PageBuffer buffer(std::max<uint32_t>(o.size, kServerBuffer));
  ibv_mr* mr =
      check(ibv_reg_mr(r.pd, buffer.data, buffer.size,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE),
            "ibv_reg_mr");

  // S.4: send its address and key.
  BufferInfo info{reinterpret_cast<uint64_t>(buffer.data), mr->rkey,
                  static_cast<uint32_t>(buffer.size)};
  ibv_mr* info_mr = check(ibv_reg_mr(r.pd, &info, sizeof info, 0), "ibv_reg_mr");
  ibv_sge sge{reinterpret_cast<uint64_t>(&info), sizeof info, info_mr->lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  post_and_wait(client->qp, r.cq, wr);
  std::printf("server: sent buffer address 0x%llx, rkey 0x%x, %u bytes\n",
              static_cast<unsigned long long>(info.addr), info.rkey, info.length);

  // S.5: the client works on the buffer without us; wait for it to disconnect.
  rdma_ack_cm_event(expect(channel, RDMA_CM_EVENT_DISCONNECTED));
  std::printf("server: client disconnected\n");
  ibv_dereg_mr(info_mr);
  ibv_dereg_mr(mr);
  teardown(client, r);
  rdma_destroy_id(client);
  rdma_destroy_id(listener);
  rdma_destroy_event_channel(channel);
  return 0;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Times `iters` one-sided operations, one at a time (latency) and then `depth` in flight
// (bandwidth). Prints both.
void timed_loop(const char* name, ibv_qp* qp, ibv_cq* cq, ibv_send_wr& wr, const Options& o) {
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iters; ++i) post_and_wait(qp, cq, wr);
  const double latency_us = seconds_since(start) / o.iters * 1e6;

  constexpr int kDepth = 16;
  start = std::chrono::steady_clock::now();
  int posted = 0, done = 0;
  while (done < o.iters) {
    while (posted < o.iters && posted - done < kDepth) {
      ibv_send_wr* bad = nullptr;
      check(ibv_post_send(qp, &wr, &bad), "ibv_post_send");
      ++posted;
    }
    ibv_wc wc[kDepth];
    const int n = ibv_poll_cq(cq, kDepth, wc);
    for (int i = 0; i < n; ++i)
      if (wc[i].status != IBV_WC_SUCCESS) {
        std::fprintf(stderr, "rdma_client_server: %s failed: %s\n", name,
                     ibv_wc_status_str(wc[i].status));
        std::exit(1);
      }
    done += n;
  }
  const double secs = seconds_since(start);
  std::printf("client: RDMA %-5s %8u B x %d: latency %8.2f us, bandwidth %9.1f MB/s\n", name,
              o.size, o.iters, latency_us, static_cast<double>(o.size) * o.iters / secs / 1e6);
}

int run_client(const Options& o) {
  rdma_event_channel* channel = check(rdma_create_event_channel(), "rdma_create_event_channel");
  rdma_cm_id* id = nullptr;
  check(rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP), "rdma_create_id");
  addrinfo* res = nullptr;
  if (getaddrinfo(o.host.c_str(), o.port.c_str(), nullptr, &res) != 0 || !res) {
    std::fprintf(stderr, "rdma_client_server: cannot resolve %s\n", o.host.c_str());
    return 1;
  }
  check(rdma_resolve_addr(id, nullptr, res->ai_addr, 2000), "rdma_resolve_addr");
  freeaddrinfo(res);
  rdma_ack_cm_event(expect(channel, RDMA_CM_EVENT_ADDR_RESOLVED));
  check(rdma_resolve_route(id, 2000), "rdma_resolve_route");
  rdma_ack_cm_event(expect(channel, RDMA_CM_EVENT_ROUTE_RESOLVED));

  // C.1: resources, and a receive ready for the server's buffer information.
  Resources r = setup_qp(id);
  BufferInfo info{};
  ibv_mr* info_mr =
      check(ibv_reg_mr(r.pd, &info, sizeof info, IBV_ACCESS_LOCAL_WRITE), "ibv_reg_mr");
  ibv_sge info_sge{reinterpret_cast<uint64_t>(&info), sizeof info, info_mr->lkey};
  ibv_recv_wr recv{};
  recv.sg_list = &info_sge;
  recv.num_sge = 1;
  ibv_recv_wr* bad_recv = nullptr;
  check(ibv_post_recv(id->qp, &recv, &bad_recv), "ibv_post_recv");

  // C.2-C.3: connect; the server sends where its buffer is.
  rdma_conn_param param{};
  param.initiator_depth = param.responder_resources = 1;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  check(rdma_connect(id, &param), "rdma_connect");
  rdma_ack_cm_event(expect(channel, RDMA_CM_EVENT_ESTABLISHED));
  wait_recv(r.cq);
  std::printf("client: server buffer at 0x%llx, rkey 0x%x, %u bytes\n",
              static_cast<unsigned long long>(info.addr), info.rkey, info.length);
  if (info.length < o.size) {
    std::fprintf(stderr, "rdma_client_server: server buffer is smaller than --size\n");
    return 1;
  }

  // C.4: our own buffers: one to write from, one to read into.
  PageBuffer source(o.size), sink(o.size);
  for (uint32_t i = 0; i < o.size; ++i) source.data[i] = static_cast<char>('a' + i % 26);
  const int access = IBV_ACCESS_LOCAL_WRITE;
  ibv_mr* source_mr = check(ibv_reg_mr(r.pd, source.data, source.size, access), "ibv_reg_mr");
  ibv_mr* sink_mr = check(ibv_reg_mr(r.pd, sink.data, sink.size, access), "ibv_reg_mr");

  ibv_sge sge{reinterpret_cast<uint64_t>(source.data), o.size, source_mr->lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = info.addr;
  wr.wr.rdma.rkey = info.rkey;
  timed_loop("WRITE", id->qp, r.cq, wr, o);

  sge = ibv_sge{reinterpret_cast<uint64_t>(sink.data), o.size, sink_mr->lkey};
  wr.opcode = IBV_WR_RDMA_READ;
  timed_loop("READ", id->qp, r.cq, wr, o);

  // The server's buffer holds what we wrote; reading it back must give the same bytes.
  const bool same = std::memcmp(source.data, sink.data, o.size) == 0;
  std::printf("client: data read back %s what was written\n", same ? "matches" : "DIFFERS FROM");

  // C.5: disconnect and clean up.
  check(rdma_disconnect(id), "rdma_disconnect");
  rdma_ack_cm_event(expect(channel, RDMA_CM_EVENT_DISCONNECTED));
  ibv_dereg_mr(sink_mr);
  ibv_dereg_mr(source_mr);
  ibv_dereg_mr(info_mr);
  teardown(id, r);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(channel);
  return same ? 0 : 1;
}

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: rdma_client_server --server [--port P] [--size BYTES]\n"
               "       rdma_client_server --client HOST [--port P] [--size BYTES] [--iters N]\n");
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "rdma_client_server: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--server")
      o.server = true;
    else if (a == "--client")
      o.host = value();
    else if (a == "--port")
      o.port = value();
    else if (a == "--size")
      o.size = static_cast<uint32_t>(std::stoul(value()));
    else if (a == "--iters")
      o.iters = std::stoi(value());
    else
      usage();
  }
  if (!o.server && o.host.empty()) usage();
  if (o.size == 0 || o.iters <= 0) {
    std::fprintf(stderr, "rdma_client_server: --size and --iters must be positive\n");
    std::exit(2);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  return o.server ? run_server(o) : run_client(o);
}

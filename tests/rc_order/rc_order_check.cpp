// Checks RC ordering end to end with many operations in flight: the client posts, for each
// i, an RDMA WRITE of i into slot i of the server's log and then a SEND_WITH_IMM carrying i.
// The server requires the sends to arrive as 0, 1, 2, ... and each one's WRITE to be in its
// log already (RC executes a QP's operations in order), and answers "ok" or where order
// broke over the TCP connection used to exchange the QPs' addresses.
//
// Usage: rc_order_check server PORT
//        rc_order_check client HOST PORT [MESSAGES]
// Exit status 0 when every message arrived in order with its data.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kInFlight = 64;        // client: operations in flight
constexpr int kReceives = 256;       // server: receives kept posted
constexpr int kTimeoutSeconds = 60;  // any wait for a completion or a peer
constexpr uint32_t kMaxMessages = 1u << 24;

[[noreturn]] void die(const std::string& what, int error = errno) {
  std::fprintf(stderr, "rc_order_check: %s: %s\n", what.c_str(), std::strerror(error));
  std::exit(2);
}

// What each side tells the other over TCP.
struct Address {
  uint32_t qpn;
  uint32_t psn;
  uint8_t gid[16];
  uint64_t log_addr;  // server: its log of uint64_t slots
  uint32_t log_rkey;
  uint32_t messages;  // client: how many it will send
};

bool send_all(int fd, const void* p, size_t n) {
  return send(fd, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
}

bool recv_all(int fd, void* p, size_t n) {
  return recv(fd, p, n, MSG_WAITALL) == static_cast<ssize_t>(n);
}

int tcp_server(int port) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(listener, 1) != 0)
    die("listen");
  const int fd = accept(listener, nullptr, nullptr);
  close(listener);
  if (fd < 0) die("accept");
  return fd;
}

int tcp_client(const char* host, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1) die("address " + std::string(host));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("connect");
  return fd;
}

struct Verbs {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<uint64_t> memory;

  explicit Verbs(size_t slots) : memory(slots) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list || n == 0) die("no RDMA device");
    ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    if (!ctx) die("ibv_open_device");
    pd = ibv_alloc_pd(ctx);
    cq = pd ? ibv_create_cq(ctx, 2 * kReceives + kInFlight, nullptr, nullptr, 0) : nullptr;
    if (!cq) die("pd/cq");
    mr = ibv_reg_mr(pd, memory.data(), memory.size() * sizeof(uint64_t),
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!mr) die("ibv_reg_mr");
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = kInFlight;
    init.cap.max_recv_wr = kReceives;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    qp = ibv_create_qp(pd, &init);
    if (!qp) die("ibv_create_qp");
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (const int rc = ibv_modify_qp(
            qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      die("INIT", rc);
  }

  Address address() const {
    Address a{};
    a.qpn = qp->qp_num;
    a.psn = 0;
    ibv_gid gid{};
    if (ibv_query_gid(ctx, 1, 0, &gid) != 0) die("ibv_query_gid");
    std::memcpy(a.gid, gid.raw, 16);
    a.log_addr = reinterpret_cast<uint64_t>(memory.data());
    a.log_rkey = mr->rkey;
    return a;
  }

  void connect_to(const Address& peer) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = IBV_MTU_1024;
    attr.dest_qp_num = peer.qpn;
    attr.rq_psn = peer.psn;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 1;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.port_num = 1;
    attr.ah_attr.grh.hop_limit = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, peer.gid, 16);
    if (const int rc =
            ibv_modify_qp(qp, &attr,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      die("RTR", rc);
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    // 0.5 s per try, eight tries: this checks order, not speed, and on a loaded CI machine
    // six busy-polling processes and their serving threads share two CPUs (with 67 ms per
    // try a client once gave up after its server went a second without being scheduled).
    attr.timeout = 17;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;  // the server reposts receives as it goes
    attr.sq_psn = 0;
    attr.max_rd_atomic = 1;
    if (const int rc =
            ibv_modify_qp(qp, &attr,
                          IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                              IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
      die("RTS", rc);
  }

  // One completion, successful, within the time limit.
  ibv_wc next_completion() {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(kTimeoutSeconds);
    ibv_wc wc{};
    while (ibv_poll_cq(cq, 1, &wc) == 0)
      if (std::chrono::steady_clock::now() > give_up) die("no completion in time");
    if (wc.status != IBV_WC_SUCCESS) {
      std::fprintf(stderr, "rc_order_check: completion %s\n", ibv_wc_status_str(wc.status));
      std::exit(2);
    }
    return wc;
  }

  void post_receive(uint64_t id) {
    ibv_recv_wr wr{};
    wr.wr_id = id;
    ibv_recv_wr* bad = nullptr;
    if (const int rc = ibv_post_recv(qp, &wr, &bad)) die("ibv_post_recv", rc);
  }
};

int run_server(int port) {
  const int fd = tcp_server(port);
  Address peer{};
  if (!recv_all(fd, &peer, sizeof peer) || peer.messages == 0 || peer.messages > kMaxMessages)
    die("peer address");
  Verbs v(peer.messages);
  for (int i = 0; i < kReceives; ++i) v.post_receive(static_cast<uint64_t>(i));
  v.connect_to(peer);
  const Address mine = v.address();
  if (!send_all(fd, &mine, sizeof mine)) die("send address");
  std::string verdict = "ok";
  for (uint32_t expected = 0; expected < peer.messages && verdict == "ok"; ++expected) {
    const ibv_wc wc = v.next_completion();
    const uint32_t got = ntohl(wc.imm_data);
    if (wc.opcode != IBV_WC_RECV || !(wc.wc_flags & IBV_WC_WITH_IMM) || got != expected)
      verdict = "message " + std::to_string(expected) + " arrived as " + std::to_string(got);
    else if (v.memory[expected] != expected + 1)
      verdict = "message " + std::to_string(expected) + " before its write";
    v.post_receive(wc.wr_id);
  }
  std::printf("server: %u messages: %s\n", peer.messages, verdict.c_str());
  const bool ok = verdict == "ok";
  send_all(fd, &ok, sizeof ok);
  close(fd);
  return ok ? 0 : 1;
}

int run_client(const char* host, int port, uint32_t messages) {
  const int fd = tcp_client(host, port);
  Verbs v(messages);  // the client's copy of the values it writes
  for (uint32_t i = 0; i < messages; ++i) v.memory[i] = i + 1;
  Address mine = v.address();
  mine.messages = messages;
  Address peer{};
  if (!send_all(fd, &mine, sizeof mine) || !recv_all(fd, &peer, sizeof peer))
    die("address exchange");
  v.connect_to(peer);
  int in_flight = 0;
  for (uint32_t i = 0; i < messages; ++i) {
    for (; in_flight + 2 > kInFlight; --in_flight) v.next_completion();
    ibv_sge sge{reinterpret_cast<uint64_t>(&v.memory[i]), sizeof(uint64_t), v.mr->lkey};
    ibv_send_wr write{}, message{};
    write.opcode = IBV_WR_RDMA_WRITE;
    write.sg_list = &sge;
    write.num_sge = 1;
    write.send_flags = IBV_SEND_SIGNALED;
    write.wr.rdma.remote_addr = peer.log_addr + i * sizeof(uint64_t);
    write.wr.rdma.rkey = peer.log_rkey;
    write.next = &message;
    message.opcode = IBV_WR_SEND_WITH_IMM;
    message.imm_data = htonl(i);
    message.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    if (const int rc = ibv_post_send(v.qp, &write, &bad)) die("ibv_post_send", rc);
    in_flight += 2;
  }
  for (; in_flight > 0; --in_flight) v.next_completion();
  bool ok = false;
  if (!recv_all(fd, &ok, sizeof ok)) die("verdict");
  std::printf("client: %u messages: %s\n", messages, ok ? "in order" : "out of order");
  close(fd);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string role = argc > 1 ? argv[1] : "";
  if (role == "server" && argc == 3) return run_server(std::atoi(argv[2]));
  const unsigned long messages = argc == 5 ? std::strtoul(argv[4], nullptr, 10) : 20000;
  if (role == "client" && (argc == 4 || argc == 5) && messages > 0 && messages <= kMaxMessages)
    return run_client(argv[2], std::atoi(argv[3]), static_cast<uint32_t>(messages));
  std::fprintf(stderr, "usage: rc_order_check server PORT | client HOST PORT [MESSAGES]\n");
  return 2;
}

#include "rc_peer/rc_peer.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

namespace rc_peer {

void die(const std::string& what, int error) {
  std::fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what.c_str(),
               std::strerror(error));
  std::exit(2);
}

bool send_all(int fd, const void* p, size_t n) {
  return send(fd, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
}

bool recv_all(int fd, void* p, size_t n) {
  return recv(fd, p, n, MSG_WAITALL) == static_cast<ssize_t>(n);
}

namespace {

sockaddr_in ipv4(const char* host, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (host && inet_pton(AF_INET, host, &a.sin_addr) != 1) die("address " + std::string(host));
  return a;
}

}  // namespace

int tcp_server(int port) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const sockaddr_in a = ipv4(nullptr, port);
  if (bind(listener, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 ||
      listen(listener, 1) != 0)
    die("listen");
  const int fd = accept(listener, nullptr, nullptr);
  close(listener);
  if (fd < 0) die("accept");
  return fd;
}

int tcp_client(const char* host, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const sockaddr_in a = ipv4(host, port);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) die("connect");
  return fd;
}

void check_success(const ibv_wc& wc) {
  if (wc.status == IBV_WC_SUCCESS) return;
  std::fprintf(stderr, "%s: completion of %llu: %s\n", program_invocation_short_name,
               static_cast<unsigned long long>(wc.wr_id), ibv_wc_status_str(wc.status));
  std::exit(2);
}

RcPeer::RcPeer(const Options& options)
    : slots(options.slots),
      ack_timeout_(options.ack_timeout),
      psn_(std::random_device{}() & 0xffffff),
      sq_psn_offset_(options.sq_psn_offset) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) die("no RDMA device");
  ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!ctx) die("ibv_open_device");
  pd = ibv_alloc_pd(ctx);
  if (!pd) die("ibv_alloc_pd");
  if (options.completion_channel && !(channel = ibv_create_comp_channel(ctx)))
    die("ibv_create_comp_channel");
  cq = ibv_create_cq(ctx, options.send_depth + options.recv_depth, nullptr, channel, 0);
  if (!cq) die("ibv_create_cq");
  mr = ibv_reg_mr(pd, slots.data(), slots.size() * sizeof(uint64_t), options.access);
  if (!mr) die("ibv_reg_mr");
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = static_cast<uint32_t>(options.send_depth);
  init.cap.max_recv_wr = static_cast<uint32_t>(options.recv_depth);
  init.cap.max_send_sge = init.cap.max_recv_sge = 1;
  qp = ibv_create_qp(pd, &init);
  if (!qp) die("ibv_create_qp");
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.qp_access_flags = static_cast<unsigned>(options.access);
  if (const int rc = ibv_modify_qp(
          qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("INIT", rc);
}

Address RcPeer::address() const {
  Address a{};
  a.qpn = qp->qp_num;
  a.psn = psn_;
  ibv_gid gid{};
  if (ibv_query_gid(ctx, 1, 0, &gid) != 0) die("ibv_query_gid");
  std::memcpy(a.gid, gid.raw, 16);
  a.slots_addr = reinterpret_cast<uint64_t>(slots.data());
  a.slots_rkey = mr->rkey;
  return a;
}

void RcPeer::connect_to(const Address& peer) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = peer.qpn;
  attr.rq_psn = peer.psn;
  attr.max_dest_rd_atomic = 4;
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
  attr.timeout = ack_timeout_;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;  // receives are reposted as the programs go
  attr.sq_psn = (psn_ + sq_psn_offset_) & 0xffffff;
  attr.max_rd_atomic = 4;
  if (const int rc = ibv_modify_qp(qp, &attr,
                                   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    die("RTS", rc);
}

void RcPeer::post_receive(uint64_t id) {
  ibv_recv_wr wr{};
  wr.wr_id = id;
  ibv_recv_wr* bad = nullptr;
  if (const int rc = ibv_post_recv(qp, &wr, &bad)) die("ibv_post_recv", rc);
}

void RcPeer::post(ibv_send_wr& wr) {
  ibv_send_wr* bad = nullptr;
  if (const int rc = ibv_post_send(qp, &wr, &bad)) die("ibv_post_send", rc);
}

ibv_wc RcPeer::next_completion() {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(kTimeoutSeconds);
  ibv_wc wc{};
  while (ibv_poll_cq(cq, 1, &wc) == 0)
    if (std::chrono::steady_clock::now() > give_up) die("no completion in time", ETIMEDOUT);
  check_success(wc);
  return wc;
}

}  // namespace rc_peer

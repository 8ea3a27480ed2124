// Connection set-up rate: N RDMA CM connections (resolve address and route, create an RC
// QP, connect, established), one after the other, against a server process that accepts
// each with a QP of its own; beside it, N plain TCP connections between the same two
// processes, the floor any connection manager over TCP pays.
//
// Usage: cm_connect_rate [N]     (run on softrdma: build/softrdma-run build/bench/cm_connect_rate)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "cm_connect_rate: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

int free_port() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  close(s);
  return ntohs(a.sin_port);
}

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

rdma_cm_event* next(rdma_event_channel* ch, rdma_cm_event_type want) {
  rdma_cm_event* e = nullptr;
  if (rdma_get_cm_event(ch, &e)) die("rdma_get_cm_event");
  if (e->event != want) {
    std::fprintf(stderr, "cm_connect_rate: got %s, wanted %s\n", rdma_event_str(e->event),
                 rdma_event_str(want));
    std::exit(1);
  }
  return e;
}

ibv_qp_init_attr qp_attr() {
  ibv_qp_init_attr a{};
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = a.cap.max_recv_wr = 16;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  return a;
}

// The server: accepts `n` connections, each with a QP, then waits for them to go away.
void serve_rdma(int port, int n, int ready_fd) {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* listener = nullptr;
  if (rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP)) die("rdma_create_id");
  sockaddr_in a = loopback(port);
  if (rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&a)) || rdma_listen(listener, n))
    die("listen");
  [[maybe_unused]] ssize_t w = write(ready_fd, "r", 1);
  std::vector<rdma_cm_id*> ids;
  for (int established = 0, disconnected = 0; disconnected < n;) {
    rdma_cm_event* e = nullptr;
    if (rdma_get_cm_event(ch, &e)) die("rdma_get_cm_event");
    rdma_cm_id* id = e->id;
    const rdma_cm_event_type type = e->event;
    rdma_ack_cm_event(e);
    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
      ibv_qp_init_attr attr = qp_attr();
      if (rdma_create_qp(id, nullptr, &attr) || rdma_accept(id, nullptr)) die("accept");
      ids.push_back(id);
    } else if (type == RDMA_CM_EVENT_ESTABLISHED) {
      ++established;
    } else if (type == RDMA_CM_EVENT_DISCONNECTED) {
      ++disconnected;
    }
  }
  for (rdma_cm_id* id : ids) {
    rdma_destroy_qp(id);
    rdma_destroy_id(id);
  }
  rdma_destroy_id(listener);
  rdma_destroy_event_channel(ch);
}

double connect_rdma(int port, int n) {
  rdma_event_channel* ch = rdma_create_event_channel();
  std::vector<rdma_cm_id*> ids;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP)) die("rdma_create_id");
    sockaddr_in a = loopback(port);
    if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&a), 2000))
      die("rdma_resolve_addr");
    rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
    if (rdma_resolve_route(id, 2000)) die("rdma_resolve_route");
    rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
    ibv_qp_init_attr attr = qp_attr();
    if (rdma_create_qp(id, nullptr, &attr)) die("rdma_create_qp");
    rdma_conn_param p{};
    p.initiator_depth = p.responder_resources = 1;
    p.retry_count = p.rnr_retry_count = 7;
    if (rdma_connect(id, &p)) die("rdma_connect");
    rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ESTABLISHED));
    ids.push_back(id);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (rdma_cm_id* id : ids) {
    rdma_disconnect(id);
    rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_DISCONNECTED));
    rdma_destroy_qp(id);
    rdma_destroy_id(id);
  }
  rdma_destroy_event_channel(ch);
  return secs;
}

void serve_tcp(int port, int n, int ready_fd) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = loopback(port);
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) || listen(l, n)) die("tcp listen");
  [[maybe_unused]] ssize_t w = write(ready_fd, "r", 1);
  for (int i = 0; i < n; ++i) {
    int c = accept(l, nullptr, nullptr);
    char byte = 0;  // a one-byte exchange, as a handshake would at least do
    if (read(c, &byte, 1) == 1) [[maybe_unused]]
      ssize_t r = write(c, &byte, 1);
    close(c);
  }
  close(l);
}

double connect_tcp(int port, int n) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = loopback(port);
    if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a)) die("tcp connect");
    char byte = 1;
    if (write(s, &byte, 1) != 1 || read(s, &byte, 1) != 1) die("tcp exchange");
    close(s);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Runs `serve` in a child process and `measure` here; returns the measured seconds.
template <typename Serve, typename Measure>
double side_by_side(int n, Serve serve, Measure measure) {
  const int port = free_port();
  int ready[2];
  if (pipe(ready)) die("pipe");
  const pid_t child = fork();
  if (child == 0) {
    serve(port, n, ready[1]);
    _exit(0);
  }
  char byte;
  if (read(ready[0], &byte, 1) != 1) die("server start");
  const double secs = measure(port, n);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("server");
  return secs;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 100;
  const double rdma = side_by_side(n, serve_rdma, connect_rdma);
  const double tcp = side_by_side(n, serve_tcp, connect_tcp);
  std::printf("connections=%d rdma_cm_per_s=%.0f tcp_per_s=%.0f ratio=%.2f\n", n, n / rdma, n / tcp,
              tcp / rdma);
  return 0;
}

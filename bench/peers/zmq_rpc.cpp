// ZeroMQ request/response, as its users write it: a ROUTER server on its own thread, a
// DEALER client keeping `depth` requests in flight, blocking calls.
//   --where inproc|ipc|tcp
#include <zmq.h>

#include <thread>

#include "bench_common.hpp"

using namespace rdmakit::bench;

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  void* ctx = zmq_ctx_new();
  std::string endpoint;
  if (a.where == "inproc")
    endpoint = "inproc://bench";
  else if (a.where == "ipc")
    endpoint = "ipc:///tmp/rdmakit-zmq-bench-" + std::to_string(getpid());
  else
    endpoint = "tcp://127.0.0.1:*";
  void* router = zmq_socket(ctx, ZMQ_ROUTER);
  const int zero = 0;
  zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof zero);
  if (zmq_bind(router, endpoint.c_str()) != 0) {
    std::fprintf(stderr, "zmq_bind %s: %s\n", endpoint.c_str(), zmq_strerror(zmq_errno()));
    return 1;
  }
  char bound[256];
  size_t bound_len = sizeof bound;
  zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, bound, &bound_len);
  std::thread server([router] {
    char identity[256], body[1 << 16];
    for (;;) {
      const int id = zmq_recv(router, identity, sizeof identity, 0);
      const int n = id < 0 ? -1 : zmq_recv(router, body, sizeof body, 0);
      if (n < 0) break;  // the context is being terminated
      zmq_send(router, identity, static_cast<size_t>(id), ZMQ_SNDMORE);
      zmq_send(router, body, static_cast<size_t>(n), 0);
    }
    zmq_close(router);  // sockets belong to one thread: the server's closes here
  });
  void* dealer = zmq_socket(ctx, ZMQ_DEALER);
  zmq_setsockopt(dealer, ZMQ_LINGER, &zero, sizeof zero);
  zmq_connect(dealer, bound);
  std::vector<char> request(a.size, 1), reply(a.size + 64);
  Meter meter(a);
  std::vector<Clock::time_point> started;
  for (unsigned i = 0; i < a.depth; ++i) {
    started.push_back(Clock::now());
    zmq_send(dealer, request.data(), request.size(), 0);
  }
  for (size_t next = 0; !meter.finished(); next = (next + 1) % a.depth) {
    zmq_recv(dealer, reply.data(), reply.size(), 0);
    if (a.test == "latency")
      meter.done(started[next]);
    else
      meter.done_many(1);
    started[next] = a.test == "latency" ? Clock::now() : Clock::time_point{};
    zmq_send(dealer, request.data(), request.size(), 0);
  }
  meter.print("zeromq");
  zmq_close(dealer);
  zmq_ctx_term(ctx);
  server.join();
  return 0;
}

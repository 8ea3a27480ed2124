// gRPC C++ unary echo over TCP loopback, as its users write it: a synchronous server, and a
// synchronous client (latency) or an asynchronous one keeping `depth` calls in flight (rate).
#include <grpcpp/grpcpp.h>

#include <thread>

#include "bench_common.hpp"
#include "echo.grpc.pb.h"

using namespace rdmakit::bench;

namespace {

class EchoService final : public rdmakit::bench::Echo::Service {
  grpc::Status Call(grpc::ServerContext*, const Blob* request, Blob* reply) override {
    reply->set_data(request->data());
    return grpc::Status::OK;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  EchoService service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  auto stub = rdmakit::bench::Echo::NewStub(channel);
  Blob request;
  request.set_data(std::string(a.size, 'x'));
  Meter meter(a);
  if (a.test == "latency") {
    while (!meter.finished()) {
      grpc::ClientContext context;
      Blob reply;
      const Clock::time_point t = Clock::now();
      if (!stub->Call(&context, request, &reply).ok()) return 1;
      meter.done(t);
    }
  } else {
    struct Pending {
      grpc::ClientContext context;
      Blob reply;
      grpc::Status status;
      std::unique_ptr<grpc::ClientAsyncResponseReader<Blob>> call;
    };
    grpc::CompletionQueue cq;
    auto start = [&](std::unique_ptr<Pending>& p) {
      p = std::make_unique<Pending>();  // a ClientContext serves one call
      p->call = stub->AsyncCall(&p->context, request, &cq);
      p->call->Finish(&p->reply, &p->status, p.get());
    };
    std::vector<std::unique_ptr<Pending>> slots(a.depth);
    for (auto& p : slots) start(p);
    void* tag = nullptr;
    bool ok = false;
    while (!meter.finished() && cq.Next(&tag, &ok)) {
      for (auto& p : slots) {
        if (p.get() != tag) continue;
        if (!p->status.ok()) return 1;
        meter.done_many(1);
        start(p);
        break;
      }
    }
    meter.print("grpc");
    std::fflush(stdout);
    _exit(0);  // calls still in flight: skip the orderly shutdown
  }
  meter.print("grpc");
  server->Shutdown();
  return 0;
}

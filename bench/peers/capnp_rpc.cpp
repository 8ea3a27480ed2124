// Cap'n Proto RPC echo over TCP loopback, as its users write it: an EzRpcServer on its own
// thread, an EzRpcClient waiting on one call (latency) or keeping `depth` calls in flight,
// each resent when it completes (rate).
#include <capnp/ez-rpc.h>
#include <kj/async.h>

#include <atomic>
#include <thread>

#include "bench_common.hpp"
#include "echo.capnp.h"

using namespace rdmakit::bench;

namespace {

class EchoImpl final : public Echo::Server {
  kj::Promise<void> call(CallContext context) override {
    context.getResults().setData(context.getParams().getData());
    return kj::READY_NOW;
  }
};

kj::Promise<void> keep_calling(Echo::Client& echo, kj::ArrayPtr<const kj::byte> data,
                               Meter& meter) {
  auto request = echo.callRequest();
  request.setData(data);
  return request.send().then([&echo, data, &meter](auto&&) -> kj::Promise<void> {
    meter.done_many(1);
    if (meter.finished()) return kj::READY_NOW;
    return keep_calling(echo, data, meter);
  });
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  std::atomic<unsigned> port{0};
  std::thread server([&] {
    capnp::EzRpcServer server(kj::heap<EchoImpl>(), "127.0.0.1", 0);
    port = server.getPort().wait(server.getWaitScope());
    kj::NEVER_DONE.wait(server.getWaitScope());
  });
  while (port == 0) std::this_thread::yield();
  capnp::EzRpcClient client("127.0.0.1", port);
  Echo::Client echo = client.getMain<Echo>();
  auto& ws = client.getWaitScope();
  std::vector<kj::byte> bytes(a.size, 1);
  kj::ArrayPtr<const kj::byte> data(bytes.data(), bytes.size());
  Meter meter(a);
  if (a.test == "latency") {
    while (!meter.finished()) {
      auto request = echo.callRequest();
      request.setData(data);
      const Clock::time_point t = Clock::now();
      request.send().wait(ws);
      meter.done(t);
    }
  } else {
    kj::Vector<kj::Promise<void>> loops;
    for (unsigned i = 0; i < a.depth; ++i) loops.add(keep_calling(echo, data, meter));
    kj::joinPromises(loops.releaseAsArray()).wait(ws);
  }
  meter.print("capnproto");
  std::fflush(stdout);
  _exit(0);  // the server thread waits forever by design
}

// An rc:// (RDMA CM) client whose process freezes right after it sent its connection
// request: the server answers it and waits for its RTU, but its poll never does, and
// everyone else is served meanwhile.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "rdmakit/rpc/client.hpp"
#include "rpc_fixture.hpp"

using namespace rdmakit::rpc;
using namespace rdmakit::rpc::testing;

namespace {
// Set in the client process: it stops itself once its request is on its way.
bool g_freeze_after_connect = false;
}  // namespace

// Stands in for librdmacm's rdma_connect in this program (the executable's definition comes
// first), calling the real one.
extern "C" int rdma_connect(rdma_cm_id* id, rdma_conn_param* param) {
  using Real = int (*)(rdma_cm_id*, rdma_conn_param*);
  static const auto real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "rdma_connect"));
  const int rc = real(id, param);
  if (g_freeze_after_connect) raise(SIGSTOP);  // every thread, the CM's too: no RTU
  return rc;
}

namespace {

// Waits (bounded) until `child` has stopped.
bool stopped(pid_t child) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    const pid_t got = waitpid(child, &status, WNOHANG | WUNTRACED);
    if (got == child) return WIFSTOPPED(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

TEST(FrozenCmClient, NeverHoldsUpTheServersPoll) {
  // The client is forked before this process sets anything up; it learns the URL by a pipe.
  UrlPipe url_pipe;
  ASSERT_TRUE(url_pipe.ok());
  ChildProcess client([&] {
    const std::string url = url_pipe.receive();
    g_freeze_after_connect = true;
    std::error_code error;
    Client::connect(url, {}, error);  // stops inside, until killed
  });
  ASSERT_TRUE(client.started());
  Server server = Server::listen(fresh_url("rc"));
  ASSERT_TRUE(url_pipe.send(server.url()));
  ASSERT_TRUE(stopped(client.pid())) << "the client did not send its request";

  // The request reaches the server's CM a little later: every poll over a second is timed,
  // and a listener that waited for the RTU would hold one of them for its whole CM timeout.
  const auto window = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (int i = 0; std::chrono::steady_clock::now() < window; ++i) {
    const auto start = std::chrono::steady_clock::now();
    server.poll();
    ASSERT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500))
        << "poll " << i << " waited for the frozen client";
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  expect_new_client_served(server);
  EXPECT_EQ(server.session_count(), 1u) << "the frozen client has no session";

  // Its link breaks: the request it left is dropped, and the server goes on serving.
  client.kill_and_reap();
  for (int i = 0; i < 20; ++i) {
    server.poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  expect_new_client_served(server);
}

}  // namespace

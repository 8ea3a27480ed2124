#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "rdmakit/rpc/client.hpp"
#include "rdmakit/rpc/server.hpp"

using namespace rdmakit::rpc;

namespace {
std::span<const std::byte> bytes(std::string_view s) { return std::as_bytes(std::span(s)); }
std::string text(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }
}

TEST(Rpc, InprocEcho) {
  Server server = Server::listen("inproc://echo");
  Client client = Client::connect("inproc://echo");
  ASSERT_TRUE(client.call(bytes("hello"), 7).ok());
  std::string got;
  uint64_t ud = 0;
  for (int i = 0; i < 1000 && got.empty(); ++i) {
    server.poll();
    while (auto h = server.recv()) {
      std::string reply = "re:" + text(h->data());
      EXPECT_FALSE(std::move(*h).reply(bytes(reply)));
    }
    client.poll([&](const Response& r) { got = text(r.data); ud = r.user_data; });
  }
  EXPECT_EQ(got, "re:hello");
  EXPECT_EQ(ud, 7u);
}

// Calls and replies on every transport: zero-copy access, ordering, deferred and dropped
// replies, methods, limits, flow control, many clients, large messages, both directions,
// coroutines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <optional>

#include "rdmakit/task.hpp"
#include "rpc_fixture.hpp"

using namespace rdmakit::rpc;
using namespace rdmakit::rpc::testing;

namespace {

// A reply that cannot be refused for size: the handle's whole reservation.
std::error_code echo(RecvHandle h) {
  const std::string reply = "re:" + text(h.data());
  return std::move(h).reply(bytes(reply));
}

template <typename Handle>
concept CanReply = requires(std::span<const std::byte> b) {
  std::declval<Handle>().reply(b);
};
static_assert(!CanReply<RecvHandle&>, "reply() consumes the handle: not callable on an lvalue");
static_assert(CanReply<RecvHandle&&>);
static_assert(!std::is_copy_constructible_v<RecvHandle> &&
              !std::is_copy_constructible_v<RequestToken>);

TEST_P(RpcTest, EchoCarriesUserDataAndStatus) {
  Server server = Server::listen(url());
  Client client = connect_to(server);
  ASSERT_TRUE(client.call(bytes("hello"), 42).ok());
  std::optional<Response> got;
  std::string body;
  ASSERT_TRUE(poll_until(
      server, {&client},
      [&] {
        while (auto h = server.recv()) EXPECT_FALSE(echo(std::move(*h)));
        return got.has_value();
      },
      [&](const Response& r) {
        got = r;
        body = text(r.data);
      }));
  EXPECT_EQ(got->user_data, 42u);
  EXPECT_TRUE(got->status.ok());
  EXPECT_EQ(body, "re:hello");
  EXPECT_EQ(server.session_count(), 1u);
}

TEST_P(RpcTest, RequestBytesStayPinnedWhereTheyArrivedAcrossPolls) {
  Server server = Server::listen(url());
  Client client = connect_to(server);
  ASSERT_TRUE(client.call(bytes("first, held"), 0).ok());
  std::optional<RecvHandle> held;
  ASSERT_TRUE(poll_until(server, {&client}, [&] {
    if (!held) held = server.recv();
    return held.has_value();
  }));
  const std::byte* where = held->data().data();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(where) % 16, 0u) << "payloads are 16-byte aligned";
  // Many more calls pass through while the first request is held.
  int answered = 0;
  int sent = 0;
  ASSERT_TRUE(poll_until(
      server, {&client},
      [&] {
        while (sent < 500 && client.call(bytes("filler call number xx"), 1).ok()) ++sent;
        while (auto h = server.recv()) EXPECT_FALSE(echo(std::move(*h)));
        return answered == 500;
      },
      [&](const Response& r) { answered += r.status.ok() ? 1 : 0; }));
  EXPECT_EQ(held->data().data(), where);
  EXPECT_EQ(text(held->data()), "first, held");
  EXPECT_FALSE(echo(std::move(*held)));
}

TEST_P(RpcTest, RequestsArriveInCallOrderAndDeferredRepliesGoBackInAnyOrder) {
  Server server = Server::listen(url());
  Client client = connect_to(server);
  constexpr int kCalls = 32;
  for (int i = 0; i < kCalls; ++i) {
    const std::string body = "call " + std::to_string(i);
    ASSERT_TRUE(client.call(bytes(body), static_cast<uint64_t>(i)).ok());
  }
  std::vector<RequestToken> tokens;
  ASSERT_TRUE(poll_until(server, {&client}, [&] {
    while (auto h = server.recv()) tokens.push_back(std::move(*h).into_token());
    return tokens.size() == kCalls;
  }));
  for (int i = 0; i < kCalls; ++i) EXPECT_EQ(text(tokens[i].data()), "call " + std::to_string(i));
  // Reply last first; each response must reach the call it answers.
  std::map<uint64_t, std::string> answers;
  for (int i = kCalls - 1; i >= 0; --i) {
    const std::string body = "answer " + std::to_string(i);
    ASSERT_FALSE(server.reply(std::move(tokens[i]), bytes(body)));
  }
  ASSERT_TRUE(poll_until(
      server, {&client}, [&] { return answers.size() == kCalls; },
      [&](const Response& r) { answers[r.user_data] = text(r.data); }));
  for (int i = 0; i < kCalls; ++i) EXPECT_EQ(answers[i], "answer " + std::to_string(i));
}

TEST_P(RpcTest, DroppedHandlesAndTokensAnswerTheCallerCancelled) {
  Server server = Server::listen(url());
  Client client = connect_to(server);
  ASSERT_TRUE(client.call(bytes("drop my handle"), 1).ok());
  ASSERT_TRUE(client.call(bytes("drop my token"), 2).ok());
  std::map<uint64_t, Code> codes;
  ASSERT_TRUE(poll_until(
      server, {&client},
      [&] {
        if (auto h = server.recv()) {
          if (text(h->data()) == "drop my token") {
            RequestToken t = std::move(*h).into_token();
          }
        }
        return codes.size() == 2;
      },
      [&](const Response& r) { codes[r.user_data] = r.status.code; }));
  EXPECT_EQ(codes[1], Code::cancelled);
  EXPECT_EQ(codes[2], Code::cancelled);
  // Nothing leaked: the full window is usable again.
  EXPECT_EQ(client.in_flight(client.session()), 0u);
}

TEST_P(RpcTest, MethodsGoToTheirHandlersAndUnhandledOnesCanBeRefused) {
  Options options;
  options.queue_unhandled = false;
  Server server = Server::listen(url(), options);
  server.handle(1, [](RecvHandle h) { EXPECT_FALSE(std::move(h).reply(bytes("one"))); });
  server.handle(2, [](RecvHandle h) {
    EXPECT_FALSE(std::move(h).reply_with(
        3, [](std::span<std::byte> out) { std::memcpy(out.data(), "two", 3); }));
  });
  Client client = connect_to(server);
  for (uint32_t method : {1u, 2u, 3u}) {
    CallOptions o;
    o.method = method;
    ASSERT_TRUE(client.call(bytes("x"), method, o).ok());
  }
  std::map<uint64_t, std::pair<Code, std::string>> got;
  ASSERT_TRUE(poll_until(
      server, {&client}, [&] { return got.size() == 3; },
      [&](const Response& r) {
        got[r.user_data] = {r.status.code, text(r.data)};
      }));
  EXPECT_EQ(got[1], std::make_pair(Code::ok, std::string("one")));
  EXPECT_EQ(got[2], std::make_pair(Code::ok, std::string("two")));
  EXPECT_EQ(got[3].first, Code::unimplemented);
}

TEST_P(RpcTest, AReplyLargerThanTheCallerReservedIsRefused) {
  Server server = Server::listen(url());
  Client client = connect_to(server);
  CallOptions o;
  o.max_response = 8;
  ASSERT_TRUE(client.call(bytes("small please"), 1, o).ok());
  std::optional<std::error_code> replied;
  std::optional<Response> got;
  std::string message;
  ASSERT_TRUE(poll_until(
      server, {&client},
      [&] {
        if (auto h = server.recv()) {
          EXPECT_EQ(h->max_response(), 8u);
          replied = std::move(*h).reply(bytes("this reply is far longer than eight bytes"));
        }
        return got.has_value();
      },
      [&](const Response& r) {
        got = r;
        message = std::string(r.status.message);
      }));
  EXPECT_EQ(*replied, Errc::response_too_large);
  EXPECT_EQ(got->status.code, Code::resource_exhausted);
  EXPECT_LE(message.size(), 8u);
}

TEST_P(RpcTest, AFullWindowReturnsWouldBlockAndRecovers) {
  Options options;
  options.window = 4;
  Server server = Server::listen(url(), options);
  Client client = connect_to(server, options);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(client.call(bytes("w"), i).ok());
  CallResult blocked = client.call(bytes("w"), 4);
  EXPECT_EQ(blocked.error, Errc::would_block);
  int done = 0;
  ASSERT_TRUE(poll_until(
      server, {&client},
      [&] {
        while (auto h = server.recv()) EXPECT_FALSE(echo(std::move(*h)));
        return done == 4;
      },
      [&](const Response&) { ++done; }));
  EXPECT_TRUE(client.call(bytes("w"), 5).ok());
}

TEST_P(RpcTest, ResponseSpaceIsReservedAtCallTime) {
  // Replies can never fail for lack of room: a call that would overcommit the caller's
  // response space is refused at call time instead.
  Options options;
  options.ring_bytes = 4096;
  options.window = 64;
  Server server = Server::listen(url(), options);
  Client client = connect_to(server, options);
  CallOptions o;
  o.max_response = 900;  // in a ring: ~1 KiB reserved per call
  int accepted = 0;
  while (client.call(bytes("r"), 0, o).ok()) ++accepted;
  if (GetParam() == "tcp" || GetParam() == "ud") {
    EXPECT_EQ(accepted, 64) << "streams have no fixed response space: only the window limits";
  } else {
    EXPECT_GE(accepted, 1);
    EXPECT_LT(accepted, 64);
  }
  // Every accepted call is answered with a reply as large as it reserved.
  int answered = 0;
  const std::string big(900, 'x');
  ASSERT_TRUE(poll_until(
      server, {&client},
      [&] {
        while (auto h = server.recv()) EXPECT_FALSE(std::move(*h).reply(bytes(big)));
        return answered == accepted;
      },
      [&](const Response& r) { answered += r.status.ok() && r.data.size() == 900 ? 1 : 0; }));
}

TEST_P(RpcTest, RepliesWithinALargeReservationAlwaysFit) {
  // A reservation beyond what travels inline still reserves what inline replies can take.
  Options options;
  options.ring_bytes = 4096;
  Server server = Server::listen(url(), options);
  Client client = connect_to(server, options);
  CallOptions o;
  o.max_response = 100000;
  int accepted = 0;
  while (client.call(bytes("r"), 0, o).ok()) ++accepted;
  ASSERT_GE(accepted, 1);
  int answered = 0;
  const std::string reply(1000, 'y');  // inline on the rings, most of a quarter ring each
  ASSERT_TRUE(poll_until(
      server, {&client},
      [&] {
        while (auto h = server.recv()) EXPECT_FALSE(std::move(*h).reply(bytes(reply)));
        return answered == accepted;
      },
      [&](const Response& r) { answered += r.status.ok() && r.data.size() == 1000 ? 1 : 0; }));
  EXPECT_TRUE(client.connected());
}

TEST_P(RpcTest, MixedSizesCrossTheRingEndsManyTimes) {
  // Small rings and sizes that do not divide them: frames end exactly at a ring's end, and
  // skip to its start, again and again (on rc://, a batch that reached past the end once
  // was written beyond the ring).
  Options options;
  options.ring_bytes = 4096;
  Server server = Server::listen(url(), options);
  Client client = connect_to(server, options);
  const size_t sizes[] = {8, 76, 200, 1000, 0, 48};
  int next = 0, answered = 0, wrong = 0;
  constexpr int kCalls = 3000;
  auto payload = [&](int i) { return std::string(sizes[i % 6], static_cast<char>('a' + i % 26)); };
  ASSERT_TRUE(poll_until(
      server, {&client},
      [&] {
        while (next < kCalls && client.in_flight(client.session()) < 4) {
          const std::string p = payload(next);
          if (!client.call(bytes(p), static_cast<uint64_t>(next)).ok()) break;
          ++next;
        }
        while (auto h = server.recv()) {
          const std::string echo = text(h->data());
          EXPECT_FALSE(std::move(*h).reply(bytes(echo)));
        }
        return answered == kCalls;
      },
      [&](const Response& r) {
        ++answered;
        wrong += !r.status.ok() || text(r.data) != payload(static_cast<int>(r.user_data));
      }));
  EXPECT_EQ(wrong, 0);
  EXPECT_TRUE(client.connected());
}

TEST_P(RpcTest, SixtyFourClientsOnOneServer) {
  Server server = Server::listen(url());
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<Endpoint*> endpoints;
  for (int i = 0; i < 64; ++i) {
    clients.push_back(std::make_unique<Client>(connect_to(server)));
    endpoints.push_back(clients.back().get());
  }
  constexpr int kPerClient = 20;
  std::vector<int> answered(64, 0);
  int issued = 0;
  ASSERT_TRUE(poll_until(
      server, endpoints,
      [&] {
        for (int c = 0; c < 64; ++c) {
          const int mine = issued / 64;
          if (mine < kPerClient && issued % 64 == c) {
            const std::string body = std::to_string(c);
            if (clients[c]->call(bytes(body), static_cast<uint64_t>(c)).ok()) ++issued;
          }
        }
        while (auto h = server.recv()) EXPECT_FALSE(echo(std::move(*h)));
        return std::accumulate(answered.begin(), answered.end(), 0) == 64 * kPerClient;
      },
      [&](const Response& r) {
        EXPECT_EQ(text(r.data), "re:" + std::to_string(r.user_data));
        ++answered[r.user_data];
      }));
  EXPECT_EQ(server.session_count(), 64u);
  for (int n : answered) EXPECT_EQ(n, kPerClient);
}

TEST_P(RpcTest, EightMebibyteMessagesBothWays) {
  Options options;
  options.max_message_bytes = 16u << 20;
  Server server = Server::listen(url(), options);
  Client client = connect_to(server, options);
  std::vector<std::byte> request(8u << 20);
  for (size_t i = 0; i < request.size(); ++i) request[i] = static_cast<std::byte>(i * 7 + 3);
  CallOptions o;
  o.max_response = 8u << 20;
  ASSERT_TRUE(client.call(request, 1, o).ok());
  bool checked = false;
  ASSERT_TRUE(poll_until(
      server, {&client},
      [&] {
        if (auto h = server.recv()) {
          EXPECT_TRUE(
              std::equal(h->data().begin(), h->data().end(), request.begin(), request.end()));
          // The reply is the request reversed, built in place.
          const std::span<const std::byte> in = h->data();
          EXPECT_FALSE(std::move(*h).reply_with(in.size(), [&](std::span<std::byte> out) {
            std::reverse_copy(in.begin(), in.end(), out.begin());
          }));
        }
        return checked;
      },
      [&](const Response& r) {
        ASSERT_TRUE(r.status.ok()) << r.status.message;
        ASSERT_EQ(r.data.size(), request.size());
        EXPECT_TRUE(std::equal(r.data.begin(), r.data.end(), request.rbegin()));
        checked = true;
      }));
  // A message beyond the limit is refused at once.
  std::vector<std::byte> too_big(options.max_message_bytes + 1);
  EXPECT_EQ(client.call(too_big, 2, o).error, Errc::message_too_large);
}

TEST_P(RpcTest, LargeMessagesStayIntactWhileOneIsHeldAndOthersReuseBuffers) {
  Options options;
  options.window = 8;
  Server server = Server::listen(url(), options);
  Client client = connect_to(server, options);
  constexpr size_t kSize = 1 << 20;  // out of line on the ring transports
  auto pattern = [](int id) {
    std::vector<std::byte> bytes(kSize);
    for (size_t i = 0; i < kSize; i += 64) bytes[i] = static_cast<std::byte>(id * 31 + i / 64);
    return bytes;
  };
  CallOptions o;
  o.max_response = kSize;
  o.timeout = kTrafficLimit;  // 40 MiB each way: minutes of UD datagrams under TSan
  ASSERT_TRUE(client.call(pattern(0), 0, o).ok());
  std::optional<RecvHandle> held;
  ASSERT_TRUE(poll_until(server, {&client}, [&] {
    if (!held) held = server.recv();
    return held.has_value();
  }));
  const std::vector<std::byte> first = pattern(0);
  int sent = 1, answered = 0;
  ASSERT_TRUE(poll_until(
      server, {&client},
      [&] {
        while (sent <= 40 && client.call(pattern(sent), static_cast<uint64_t>(sent), o).ok())
          ++sent;
        while (auto h = server.recv()) {
          // Echo each one back out of line too: buffers are reused in both directions.
          const std::span<const std::byte> in = h->data();
          EXPECT_FALSE(std::move(*h).reply(in));
        }
        return answered == 40;
      },
      [&](const Response& r) {
        ASSERT_TRUE(r.status.ok()) << r.status.message;
        const std::vector<std::byte> want = pattern(static_cast<int>(r.user_data));
        EXPECT_TRUE(std::equal(r.data.begin(), r.data.end(), want.begin(), want.end()))
            << "reply " << r.user_data;
        ++answered;
      }));
  EXPECT_TRUE(std::equal(held->data().begin(), held->data().end(), first.begin(), first.end()))
      << "a held request's buffer was reused under it";
  EXPECT_FALSE(std::move(*held).reply(bytes("done")));
}

TEST_P(RpcTest, EitherSideOfASessionMayCallTheOther) {
  Server server = Server::listen(url());
  Client client = connect_to(server);
  // The client serves too.
  client.handle(7,
                [](RecvHandle h) { EXPECT_FALSE(std::move(h).reply(bytes("from the client"))); });
  ASSERT_TRUE(client.call(bytes("hello"), 1).ok());
  std::optional<SessionId> session;
  std::string server_got;
  std::string client_got;
  ASSERT_TRUE(poll_until(
      server, {&client},
      [&] {
        if (auto h = server.recv()) {
          session = h->session();
          CallOptions o;
          o.method = 7;
          EXPECT_TRUE(server.call(h->session(), bytes("server asks"), 99, o).ok());
          EXPECT_FALSE(echo(std::move(*h)));
        }
        return !server_got.empty() && !client_got.empty();
      },
      [&](const Response& r) { (r.user_data == 99 ? server_got : client_got) = text(r.data); }));
  EXPECT_EQ(server_got, "from the client");
  EXPECT_EQ(client_got, "re:hello");
}

TEST_P(RpcTest, CoroutinesAwaitCallsAndSuspendOnAFullWindow) {
  Options options;
  options.window = 2;
  Server server = Server::listen(url(), options);
  Client client = connect_to(server, options);
  int finished = 0;
  std::vector<std::string> seen;
  auto worker = [&](int id) -> rdmakit::Task<void> {
    for (int i = 0; i < 5; ++i) {
      const std::string body = std::to_string(id) + "." + std::to_string(i);
      Response r = co_await client.call(bytes(body));
      EXPECT_TRUE(r.status.ok());
      seen.push_back(text(r.data));
    }
    ++finished;
  };
  // Four coroutines share a window of two: the others wait, none fails.
  for (int id = 0; id < 4; ++id) spawn(worker(id));
  ASSERT_TRUE(poll_until(server, {&client}, [&] {
    while (auto h = server.recv()) EXPECT_FALSE(echo(std::move(*h)));
    return finished == 4;
  }));
  EXPECT_EQ(seen.size(), 20u);
  for (int id = 0; id < 4; ++id) {
    for (int i = 0; i < 5; ++i) {
      const std::string want = "re:" + std::to_string(id) + "." + std::to_string(i);
      EXPECT_NE(std::find(seen.begin(), seen.end(), want), seen.end()) << want;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, RpcTest, all_transports(), transport_name);

}  // namespace

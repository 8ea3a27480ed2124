// wire/socket_tail on its own: a large payload's rest read from its socket straight into
// where it belongs, over a TCP connection on loopback; no device.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "wire/socket_tail.hpp"

namespace {

using softrdma::wire::bytes_waiting;
using softrdma::wire::SocketTail;

// A connected pair of TCP sockets on loopback: `in` reads what `out` writes.
struct Connection {
  int in = -1;
  int out = -1;
  Connection() {
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(listener, 1), 0);
    EXPECT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len), 0);
    out = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(out, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    in = accept(listener, nullptr, nullptr);
    close(listener);
  }
  ~Connection() {
    close(in);
    close(out);
  }
  void write(const std::vector<char>& bytes) const {
    EXPECT_EQ(send(out, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  }
  // Waits (bounded) until `n` bytes wait to be read.
  bool waiting(size_t n) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (bytes_waiting(in) < n) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }
};

std::vector<char> pattern(size_t n, unsigned seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 13 + seed) % 251);
  return v;
}

TEST(SocketTail, FillsTheEntriesInOrderAndTakesWhatFollowsIntoItsRoom) {
  Connection c;
  const std::vector<char> tail = pattern(10000, 1);
  const std::vector<char> next = pattern(50, 2);
  c.write(tail);
  c.write(next);
  ASSERT_TRUE(c.waiting(tail.size() + next.size()));
  EXPECT_EQ(bytes_waiting(c.in), tail.size() + next.size());
  std::vector<char> dst(tail.size());
  char after[112] = {};
  SocketTail t(c.in, tail.size(), after, sizeof after);
  const iovec entries[] = {{dst.data(), 3000}, {dst.data() + 3000, 6992}, {dst.data() + 9992, 8}};
  ASSERT_TRUE(t.read(entries, 3));
  EXPECT_EQ(t.remaining(), 0u);
  EXPECT_EQ(dst, tail);
  EXPECT_EQ(t.after_read(), next.size());
  EXPECT_EQ(std::memcmp(after, next.data(), next.size()), 0);
  EXPECT_EQ(bytes_waiting(c.in), 0u);
}

TEST(SocketTail, ARequestNotCarriedOutHasItsPayloadDroppedAndTheStreamGoesOn) {
  Connection c;
  const std::vector<char> next = pattern(64, 3);
  c.write(pattern(5000, 4));
  c.write(next);
  ASSERT_TRUE(c.waiting(5000 + next.size()));
  SocketTail t(c.in, 5000);
  ASSERT_TRUE(t.drop_rest());
  EXPECT_EQ(t.remaining(), 0u);
  std::vector<char> got(next.size());
  ASSERT_EQ(recv(c.in, got.data(), got.size(), MSG_DONTWAIT), static_cast<ssize_t>(got.size()));
  EXPECT_EQ(got, next);
}

// The responder reads a tail only once it waits whole; one that is not all there fails the
// read at once instead of waiting for the rest with locks and pins held.
TEST(SocketTail, BytesThatAreNotThereFailTheReadRatherThanWaitForThem) {
  Connection c;
  c.write(pattern(100, 5));
  ASSERT_TRUE(c.waiting(100));
  std::vector<char> dst(1000);
  SocketTail t(c.in, dst.size());
  const iovec entry{dst.data(), dst.size()};
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(t.read(&entry, 1));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  shutdown(c.out, SHUT_WR);  // and after the peer closed, with bytes still missing
  SocketTail after_close(c.in, 10);
  const iovec ten{dst.data(), 10};
  EXPECT_FALSE(after_close.read(&ten, 1));
}

// An entry list that asks for more than the tail holds is refused: it would read the next
// request's bytes as this one's payload.
TEST(SocketTail, EntriesBeyondTheTailAreRefused) {
  Connection c;
  c.write(pattern(300, 6));
  ASSERT_TRUE(c.waiting(300));
  std::vector<char> dst(300);
  SocketTail t(c.in, 200);
  const iovec entry{dst.data(), dst.size()};
  EXPECT_FALSE(t.read(&entry, 1));
  EXPECT_EQ(bytes_waiting(c.in), 300u) << "it read some all the same";
}

}  // namespace

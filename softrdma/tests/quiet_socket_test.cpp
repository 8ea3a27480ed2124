// wire::QuietSocket on its own: how often applications' looks read a socket that has been
// finding nothing.
#include <gtest/gtest.h>

#include <cstdint>

#include "wire/quiet_socket.hpp"

namespace {

using softrdma::wire::QuietSocket;

// Looks out of `looks` that read the socket, each read finding `found_bytes`.
uint32_t reads_in(QuietSocket& socket, uint32_t looks, bool found_bytes) {
  uint32_t reads = 0;
  for (uint32_t i = 0; i < looks; ++i) {
    if (socket.skip_this_look()) continue;
    ++reads;
    socket.read(found_bytes);
  }
  return reads;
}

TEST(QuietSocketTest, ASocketThatFindsBytesIsReadOnEveryLook) {
  QuietSocket socket;
  EXPECT_EQ(reads_in(socket, 1000, true), 1000u);
}

TEST(QuietSocketTest, EmptyReadsShortOfQuietKeepEveryLookReading) {
  QuietSocket socket;
  EXPECT_EQ(reads_in(socket, QuietSocket::kQuietReads - 1, false), QuietSocket::kQuietReads - 1);
  socket.read(true);  // bytes: the count of empty reads starts again
  EXPECT_EQ(reads_in(socket, QuietSocket::kQuietReads - 1, false), QuietSocket::kQuietReads - 1);
  EXPECT_FALSE(socket.skip_this_look());
}

TEST(QuietSocketTest, AQuietSocketIsReadOnOneLookInKLookEvery) {
  QuietSocket socket;
  ASSERT_EQ(reads_in(socket, QuietSocket::kQuietReads, false), QuietSocket::kQuietReads);
  constexpr uint32_t kLooks = 64 * QuietSocket::kLookEvery;
  EXPECT_EQ(reads_in(socket, kLooks, false), kLooks / QuietSocket::kLookEvery);
}

TEST(QuietSocketTest, AQuietSocketFoundWithBytesIsReadOnEveryLookAgain) {
  QuietSocket socket;
  ASSERT_EQ(reads_in(socket, QuietSocket::kQuietReads, false), QuietSocket::kQuietReads);
  // A quiet socket is still read within kLookEvery looks: there the bytes are found.
  uint32_t looks = 0;
  while (socket.skip_this_look()) ASSERT_LT(++looks, QuietSocket::kLookEvery);
  socket.read(true);
  EXPECT_EQ(reads_in(socket, 100, true), 100u);
}

}  // namespace

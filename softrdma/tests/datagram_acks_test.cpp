// wire/datagram_acks on its own: the acknowledgement word a UD QP's datagrams carry back.
#include <gtest/gtest.h>

#include <cstdint>

#include "wire/datagram_acks.hpp"

namespace {

using namespace softrdma::wire;

const uint8_t kHostA[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 51, 100, 1};
const uint8_t kHostB[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 51, 100, 2};

TEST(DatagramAcksTest, AnAcknowledgementNamesItsRequesterQpAndHost) {
  const uint64_t ack = datagram_ack(0x1234, host_tag(kHostA), 77);
  EXPECT_TRUE(acknowledges(ack, 0x1234, host_tag(kHostA)));
  EXPECT_FALSE(acknowledges(ack, 0x1235, host_tag(kHostA)));
  EXPECT_FALSE(acknowledges(ack, 0x1234, host_tag(kHostB)));
  EXPECT_FALSE(acknowledges(0, 0, 0)) << "0 is no acknowledgement";
  EXPECT_EQ(acked_psn(ack), 77u);
}

TEST(DatagramAcksTest, PsnsBeyondTwentyFourBitsWrapAsOnTheWire) {
  const uint64_t ack = datagram_ack(0x1234, host_tag(kHostA), (1u << 24) + 5);
  EXPECT_EQ(acked_psn(ack), 5u);
  EXPECT_TRUE(acknowledges(ack, (1u << 24) | 0x1234, host_tag(kHostA)))
      << "QP numbers are 24 bits, as on a NIC";
}

TEST(DatagramAcksTest, AnAcknowledgementNamesOneDatagramByItsTwentyFourBits) {
  EXPECT_TRUE(is_acked(77, 77));
  EXPECT_FALSE(is_acked(76, 77)) << "not every datagram before it: one may still be on its way";
  EXPECT_FALSE(is_acked(78, 77));
  EXPECT_TRUE(is_acked((1u << 24) + 77, 77)) << "a 32-bit PSN compared by its 24 bits";
}

}  // namespace

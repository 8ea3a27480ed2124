// GrantTable on softrdma0: QP b plays the peer, reaching memory of the owner (side a)
// through the RemoteBuffer a grant gave it.
#include "rdmakit/grant.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "loopback_pair.hpp"
#include "rdmakit/allocator.hpp"

namespace rdmakit {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;
using namespace std::chrono_literals;
using Clock = GrantTable::Clock;

constexpr size_t kBytes = 8192;

// The owner's registered memory and the peer's, with distinct contents.
struct Memories {
  explicit Memories(const ProtectionDomain& pd)
      : owner(pd, 4 * kBytes, Access::local_write), peer(pd, kBytes, Access::local_write) {
    std::memset(owner.data(), 0x0a, owner.size());
    std::memset(peer.data(), 0x0b, peer.size());
  }
  // The range the tests grant: inside the owner's registration, not at its start.
  LocalBuffer granted() const { return owner.local().subspan(kBytes, kBytes); }
  std::vector<std::byte> granted_bytes() const {
    return {granted().data(), granted().data() + granted().size()};
  }

  RawRegion owner;
  RawRegion peer;
};

// What the peer receives: the grant's RemoteBuffer after a trip through the wire form.
RemoteBuffer send_to_peer(const Grant& grant) {
  std::array<std::byte, RemoteBuffer::kWireSize> wire;
  grant.remote.encode(wire);
  return RemoteBuffer::decode(wire);
}

Clock::time_point expiry_of(const RemoteBuffer& remote) {
  return Clock::time_point(std::chrono::milliseconds(remote.expires_at_ms()));
}

TEST(Grant, PeerReadsAndWritesThroughALiveGrant) {
  testing::LoopbackPair pair;
  Memories memory(pair.pd);
  GrantTable grants(pair.pd, Access::remote_read | Access::remote_write);
  const auto before = Clock::now();
  const Grant grant =
      grants.grant(memory.granted(), Access::remote_read | Access::remote_write, 10s);
  EXPECT_NE(grant.id, 0u);
  EXPECT_EQ(grant.rights, Access::remote_read | Access::remote_write);
  EXPECT_EQ(grants.active(), 1u);

  const RemoteBuffer remote = send_to_peer(grant);
  EXPECT_EQ(remote.address(), reinterpret_cast<uintptr_t>(memory.granted().data()));
  EXPECT_EQ(remote.size(), kBytes);
  EXPECT_EQ(remote.rkey(), grant.remote.rkey());
  EXPECT_NE(remote.rkey(), memory.owner.region().rkey()) << "each grant has its own key";
  EXPECT_GE(expiry_of(remote), std::chrono::floor<std::chrono::milliseconds>(before + 10s));
  EXPECT_LE(expiry_of(remote), Clock::now() + 10s);
  EXPECT_EQ(grants.next_expiry(), expiry_of(remote));

  ASSERT_EQ(testing::one_sided(pair.b, pair.cq_b, IBV_WR_RDMA_READ, memory.peer.local(), remote),
            IBV_WC_SUCCESS);
  EXPECT_THAT(std::vector<std::byte>(memory.peer.data(), memory.peer.data() + kBytes),
              Each(std::byte{0x0a}));
  std::memset(memory.peer.data(), 0x0c, kBytes);
  ASSERT_EQ(testing::one_sided(pair.b, pair.cq_b, IBV_WR_RDMA_WRITE, memory.peer.local(), remote),
            IBV_WC_SUCCESS);
  EXPECT_THAT(memory.granted_bytes(), Each(std::byte{0x0c}));
  EXPECT_EQ(memory.owner.data()[kBytes - 1], std::byte{0x0a}) << "outside the grant";
}

TEST(Grant, AnExpiredGrantIsRevokedAndThePeerGetsARemoteAccessError) {
  testing::LoopbackPair pair;
  Memories memory(pair.pd);
  GrantTable grants(pair.pd, Access::remote_read);
  const Grant grant = grants.grant(memory.granted(), Access::remote_read, 50ms);
  const RemoteBuffer remote = send_to_peer(grant);
  ASSERT_EQ(testing::one_sided(pair.b, pair.cq_b, IBV_WR_RDMA_READ, memory.peer.local(), remote),
            IBV_WC_SUCCESS);

  // Due exactly at the millisecond the peer was told, not before.
  EXPECT_EQ(grants.revoke_expired(expiry_of(remote) - 1ms), 0u);
  EXPECT_EQ(grants.active(), 1u);
  EXPECT_EQ(grants.revoke_expired(expiry_of(remote)), 1u);
  EXPECT_EQ(grants.active(), 0u);
  EXPECT_EQ(grants.next_expiry(), std::nullopt);
  EXPECT_FALSE(grants.revoke(grant.id)) << "already revoked";

  const ibv_wc_status status =
      testing::one_sided(pair.b, pair.cq_b, IBV_WR_RDMA_READ, memory.peer.local(), remote);
  EXPECT_EQ(status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_THAT(completion_error(status).message(), HasSubstr("remote access error"));
}

TEST(Grant, RevokesOnTheRealClockToo) {
  testing::LoopbackPair pair;
  Memories memory(pair.pd);
  GrantTable grants(pair.pd, Access::remote_read);
  const Grant grant = grants.grant(memory.granted(), Access::remote_read, 20ms);
  EXPECT_EQ(grants.revoke_expired(), 0u);
  while (Clock::now() < expiry_of(grant.remote)) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(grants.revoke_expired(), 1u);
}

TEST(Grant, RightsBeyondTheOwnersMaximumAreRefused) {
  testing::LoopbackPair pair;
  Memories memory(pair.pd);
  GrantTable grants(pair.pd, Access::remote_read);
  try {
    grants.grant(memory.granted(), Access::remote_read | Access::remote_write, 10s);
    FAIL() << "granted remote_write when only remote_read is allowed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::grant_too_wide);
    EXPECT_THAT(e.what(), HasSubstr("remote_write|remote_read"));
    EXPECT_THAT(e.what(), HasSubstr("allowed: remote_read"));
  }
  std::error_code ec;
  const Grant refused =
      grants.grant(memory.granted().data(), kBytes, Access::remote_atomic, 10s, ec);
  EXPECT_EQ(ec, Errc::grant_too_wide);
  EXPECT_EQ(refused.id, 0u);
  EXPECT_EQ(grants.active(), 0u);
}

TEST(Grant, AReadOnlyGrantRefusesThePeersWrite) {
  testing::LoopbackPair pair;
  Memories memory(pair.pd);
  GrantTable grants(pair.pd, Access::remote_read | Access::remote_write);
  const Grant grant = grants.grant(memory.granted(), Access::remote_read, 10s);
  const ibv_wc_status status = testing::one_sided(pair.b, pair.cq_b, IBV_WR_RDMA_WRITE,
                                                  memory.peer.local(), send_to_peer(grant));
  EXPECT_EQ(status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(completion_error(status), completion_error(IBV_WC_REM_ACCESS_ERR));
  EXPECT_THAT(memory.granted_bytes(), Each(std::byte{0x0a}));
}

TEST(Grant, RevokingOneGrantLeavesTheOthersOnTheSameMemory) {
  testing::LoopbackPair pair;
  Memories memory(pair.pd);
  GrantTable grants(pair.pd, Access::remote_read);
  const Grant revoked = grants.grant(memory.granted(), Access::remote_read, 10s);
  const Grant kept = grants.grant(memory.granted(), Access::remote_read, 10s);
  EXPECT_NE(revoked.id, kept.id);
  EXPECT_NE(revoked.remote.rkey(), kept.remote.rkey());
  EXPECT_TRUE(grants.revoke(revoked.id));
  EXPECT_FALSE(grants.revoke(revoked.id));
  EXPECT_EQ(grants.active(), 1u);
  EXPECT_EQ(
      testing::one_sided(pair.b, pair.cq_b, IBV_WR_RDMA_READ, memory.peer.local(), kept.remote),
      IBV_WC_SUCCESS);
  EXPECT_EQ(
      testing::one_sided(pair.b, pair.cq_b, IBV_WR_RDMA_READ, memory.peer.local(), revoked.remote),
      IBV_WC_REM_ACCESS_ERR);
}

TEST(Grant, NextExpiryIsTheEarliestActiveGrant) {
  testing::LoopbackPair pair;
  Memories memory(pair.pd);
  GrantTable grants(pair.pd, Access::remote_read);
  EXPECT_EQ(grants.next_expiry(), std::nullopt);
  const Grant late = grants.grant(memory.granted(), Access::remote_read, 300s);
  const Grant early = grants.grant(memory.granted(), Access::remote_read, 100s);
  const Grant middle = grants.grant(memory.granted(), Access::remote_read, 200s);
  const Grant also_middle = grants.grant(memory.granted(), Access::remote_read, 200s);
  EXPECT_EQ(grants.next_expiry(), expiry_of(early.remote));
  EXPECT_TRUE(grants.revoke(early.id));
  EXPECT_EQ(grants.next_expiry(), expiry_of(middle.remote));
  EXPECT_EQ(
      grants.revoke_expired(std::max(expiry_of(middle.remote), expiry_of(also_middle.remote))), 2u);
  EXPECT_EQ(grants.next_expiry(), expiry_of(late.remote));
  EXPECT_EQ(grants.active(), 1u);
}

TEST(Grant, TheTableRevokesEverythingWhenDestroyed) {
  testing::LoopbackPair pair;
  Memories memory(pair.pd);
  RemoteBuffer remote;
  {
    GrantTable grants(pair.pd, Access::remote_read);
    remote = send_to_peer(grants.grant(memory.granted(), Access::remote_read, 10s));
  }
  EXPECT_EQ(testing::one_sided(pair.b, pair.cq_b, IBV_WR_RDMA_READ, memory.peer.local(), remote),
            IBV_WC_REM_ACCESS_ERR);
}

using GrantDeathTest = ::testing::Test;

TEST(GrantDeathTest, GrantsOfLocalRightsOrWithoutATimeLimitStop) {
  testing::LoopbackPair pair;
  Memories memory(pair.pd);
  GrantTable grants(pair.pd, Access::remote_read);
  EXPECT_DEATH(grants.grant(memory.granted(), Access::local_write, 10s), "needs remote rights");
  EXPECT_DEATH(grants.grant(memory.granted(), Access::remote_read, 0ms),
               "ttl that is not positive");
}

}  // namespace
}  // namespace rdmakit

// Devices, GID selection and the RAII objects, on softrdma0.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "rdmakit/context.hpp"
#include "rdmakit/memory_region.hpp"
#include "rdmakit/queue_pair.hpp"

namespace rdmakit {
namespace {

using ::testing::HasSubstr;

TEST(Devices, ListsSoftrdmaWithItsPortAndGids) {
  const std::vector<DeviceInfo> devices = list_devices();
  ASSERT_FALSE(devices.empty());
  const DeviceInfo& dev = devices.front();
  EXPECT_EQ(dev.name, "softrdma0");
  ASSERT_EQ(dev.ports.size(), 1u);
  EXPECT_EQ(dev.ports[0].state, IBV_PORT_ACTIVE);
  EXPECT_EQ(dev.ports[0].link_layer, IBV_LINK_LAYER_ETHERNET);
  ASSERT_FALSE(dev.ports[0].gids.empty());
  for (const GidEntry& gid : dev.ports[0].gids) EXPECT_EQ(gid.type, GidType::roce_v2);
  EXPECT_GT(dev.max_qp_wr, 0);
}

TEST(Devices, OpensTheDefaultDeviceOnItsActivePort) {
  Context ctx = Context::open();
  EXPECT_EQ(ctx.name(), "softrdma0");
  EXPECT_EQ(ctx.port(), 1);
  EXPECT_EQ(ctx.port_info().state, IBV_PORT_ACTIVE);
}

TEST(Devices, UnknownDeviceNameIsAClearError) {
  try {
    OpenOptions options;
    options.device = "mlx5_9";
    Context::open(options);
    FAIL() << "opened a device that does not exist";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no RDMA device named mlx5_9"));
    EXPECT_EQ(e.code(), std::errc::no_such_device);
  }
}

TEST(Devices, EnvironmentChoosesTheDevice) {
  setenv("RDMAKIT_DEVICE", "nosuchdev:1", 1);
  EXPECT_THROW(Context::open(), Error);
  setenv("RDMAKIT_DEVICE", "softrdma0:1", 1);
  EXPECT_EQ(Context::open().name(), "softrdma0");
  unsetenv("RDMAKIT_DEVICE");
}

TEST(GidSelection, PrefersRoceV2Ipv4AndExplainsWhy) {
  Context ctx = Context::open();
  const GidChoice& gid = ctx.gid();
  EXPECT_EQ(gid.entry.type, GidType::roce_v2);
  EXPECT_TRUE(gid.entry.ipv4_mapped());
  EXPECT_FALSE(gid.entry.link_local());
  // softrdma lists routable addresses first and loopback last: the first entry wins.
  EXPECT_EQ(gid.entry.index, ctx.port_info().gids.front().index);
  EXPECT_THAT(gid.summary, HasSubstr("softrdma0 port 1 GID"));
  EXPECT_THAT(gid.summary, HasSubstr("first RoCE v2 entry with an IPv4 address"));
  EXPECT_THAT(gid.summary, HasSubstr(gid.entry.address()));
}

TEST(GidSelection, ExplicitOverrideIsHonouredAndAnEmptyIndexRefused) {
  Context ctx = Context::open();
  const GidEntry& last = ctx.port_info().gids.back();
  GidChoice chosen = select_gid(ctx.get(), ctx.port(), last.index);
  EXPECT_EQ(chosen.entry.index, last.index);
  EXPECT_THAT(chosen.summary, HasSubstr("chosen by the caller"));
  try {
    select_gid(ctx.get(), ctx.port(), 4000);
    FAIL() << "accepted an empty GID index";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("GID index 4000 is empty or out of range"));
  }
  setenv("RDMAKIT_GID_INDEX", std::to_string(last.index).c_str(), 1);
  EXPECT_EQ(Context::open().gid().entry.index, last.index);
  unsetenv("RDMAKIT_GID_INDEX");
}

TEST(Objects, BuilderClampsToTheDeviceAndRecordsWhatWasGranted) {
  Context ctx = Context::open();
  ProtectionDomain pd(ctx);
  CompletionQueue cq(ctx, 64);
  QpBuilder builder(ctx, pd, cq);
  builder.send_depth(1u << 30).send_sge(1000).rd_atomic(255).inline_size(64);
  const QpCaps caps = builder.clamped_caps();
  EXPECT_EQ(caps.send_depth, static_cast<uint32_t>(ctx.attributes().max_qp_wr));
  EXPECT_EQ(caps.send_sge, static_cast<uint32_t>(ctx.attributes().max_sge));
  EXPECT_EQ(caps.rd_atomic, ctx.attributes().max_qp_rd_atom);
  QueuePair qp = builder.build();
  EXPECT_GE(qp.caps().send_depth, caps.send_depth);
  EXPECT_FALSE(qp.ready());
  EXPECT_EQ(qp.state(), IBV_QPS_RESET);
}

TEST(Objects, ParentsOutliveChildrenWhateverTheDestructionOrder) {
  auto ctx = std::make_unique<Context>(Context::open());
  auto pd = std::make_unique<ProtectionDomain>(*ctx);
  auto cq = std::make_unique<CompletionQueue>(*ctx, 16);
  QueuePair qp = QpBuilder(*ctx, *pd, *cq).build();
  std::vector<char> memory(4096);
  MemoryRegion mr = pd->register_memory(memory.data(), memory.size(), Access::all);
  // The user's handles go first; the verbs objects stay valid until the QP and MR are gone.
  ctx.reset();
  pd.reset();
  cq.reset();
  EXPECT_EQ(qp.state(), IBV_QPS_RESET);
  EXPECT_EQ(mr.local().size(), memory.size());
}

TEST(Objects, FailureNamesTheVerbTheObjectAndErrno) {
  Context ctx = Context::open();
  ProtectionDomain pd(ctx);
  try {
    pd.register_memory(nullptr, 4096, Access::local_write);
    FAIL() << "registered a null range";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("ibv_reg_mr on [(nil), +4096) with access local_write"));
    EXPECT_EQ(e.code().category(), verbs_category());
  }
  std::error_code ec;
  MemoryRegion none = pd.register_memory(nullptr, 4096, Access::local_write, ec);
  EXPECT_TRUE(ec);
  EXPECT_FALSE(none);
}

TEST(Objects, MemoryRegionSlicesCarryKeysAndCheckBounds) {
  Context ctx = Context::open();
  ProtectionDomain pd(ctx);
  std::vector<std::byte> memory(4096);
  MemoryRegion mr = pd.register_memory(memory.data(), memory.size(), Access::all);
  LocalBuffer whole = mr.local();
  auto [head, tail] = whole.split(1000);
  EXPECT_EQ(head.size(), 1000u);
  EXPECT_EQ(tail.data(), memory.data() + 1000);
  EXPECT_EQ(tail.lkey(), mr.lkey());
  RemoteBuffer remote = mr.remote().subspan(64, 8);
  EXPECT_EQ(remote.address(), reinterpret_cast<uintptr_t>(memory.data()) + 64);
  EXPECT_EQ(remote.rkey(), mr.rkey());
  std::array<std::byte, RemoteBuffer::kWireSize> wire;
  remote.encode(wire);
  RemoteBuffer decoded = RemoteBuffer::decode(wire);
  EXPECT_EQ(decoded.address(), remote.address());
  EXPECT_EQ(decoded.size(), 8u);
  EXPECT_EQ(decoded.rkey(), remote.rkey());
}

using ProgrammingErrorDeathTest = ::testing::Test;

TEST(ProgrammingErrorDeathTest, SliceOutsideTheBufferStopsWithAMessage) {
  Context ctx = Context::open();
  ProtectionDomain pd(ctx);
  std::vector<std::byte> memory(4096);
  MemoryRegion mr = pd.register_memory(memory.data(), memory.size(), Access::all);
  EXPECT_DEATH(
      mr.local().subspan(4000, 200),
      "programming error: LocalBuffer slice \\[4000, \\+200\\) is outside the buffer of 4096");
  EXPECT_DEATH(mr.remote().last(5000), "RemoteBuffer slice");
}

TEST(ProgrammingErrorDeathTest, PostingOnAnUnconnectedQpStops) {
  Context ctx = Context::open();
  ProtectionDomain pd(ctx);
  CompletionQueue cq(ctx, 16);
  QueuePair qp = QpBuilder(ctx, pd, cq).build();
  ibv_send_wr wr{};
  EXPECT_DEATH(qp.post_send(wr), "post_send on a queue pair that is not connected");
}

TEST(ProgrammingErrorDeathTest, UsingAMovedFromObjectStops) {
  Context ctx = Context::open();
  ProtectionDomain pd(ctx);
  ProtectionDomain moved = std::move(pd);
  EXPECT_DEATH(pd.get(), "use of a moved-from rdmakit::ProtectionDomain");  // NOLINT
}

}  // namespace
}  // namespace rdmakit

// The device, its port and its GID table.
#include <arpa/inet.h>
#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>

#include <vector>

#include "verbs_fixture.hpp"

// rdma-core declares these in <infiniband/marshall.h>, which Debian does not ship.
extern "C" {
void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec* src);
void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, ibv_sa_path_rec* src);
}

namespace softrdma_test {
namespace {

using DeviceTest = VerbsTest;

TEST_F(DeviceTest, IsTheOnlyDeviceAndNamedSoftrdma0) {
  int n = -1;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  EXPECT_EQ(n, 1);
  EXPECT_STREQ(ibv_get_device_name(list[0]), "softrdma0");
  EXPECT_EQ(list[n], nullptr);  // the list is null-terminated
  ibv_free_device_list(list);
  EXPECT_STREQ(ibv_get_device_name(ctx()->device), "softrdma0");
}

TEST_F(DeviceTest, QueryDeviceReportsUsableLimits) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx(), &attr), 0);
  EXPECT_GE(attr.max_sge, 2);
  EXPECT_GE(attr.max_qp_wr, 8);
  EXPECT_GE(attr.max_cqe, 1);
  EXPECT_GE(attr.max_qp, 1);
  EXPECT_GE(attr.max_mr_size, uint64_t{1} << 30);
  EXPECT_EQ(attr.atomic_cap, IBV_ATOMIC_HCA);
  EXPECT_EQ(attr.phys_port_cnt, 1);
  // Not the vendor of a real NIC whose quirks perftest or pyverbs would apply.
  EXPECT_NE(attr.vendor_id, 0x02c9u);  // Mellanox
  EXPECT_NE(attr.vendor_id, 0x1d0fu);  // Amazon
  EXPECT_NE(attr.vendor_id, 0x8086u);  // Intel
  EXPECT_NE(attr.vendor_id, 0x1425u);  // Chelsio
}

TEST_F(DeviceTest, QueryDeviceExAgreesWithQueryDevice) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx(), &attr), 0);
  ibv_device_attr_ex ex{};
  ASSERT_EQ(ibv_query_device_ex(ctx(), nullptr, &ex), 0);
  EXPECT_EQ(ex.orig_attr.max_qp_wr, attr.max_qp_wr);
  EXPECT_EQ(ex.orig_attr.max_sge, attr.max_sge);
  EXPECT_EQ(ex.orig_attr.max_cqe, attr.max_cqe);
  EXPECT_EQ(ex.orig_attr.vendor_id, attr.vendor_id);
  EXPECT_EQ(ex.orig_attr.atomic_cap, attr.atomic_cap);
  EXPECT_EQ(ex.orig_attr.node_guid, attr.node_guid);
  EXPECT_EQ(ex.orig_attr.node_guid, ibv_get_device_guid(ctx()->device));
  EXPECT_EQ(ex.phys_port_cnt_ex, 1u);
}

TEST_F(DeviceTest, QueryPortReportsActiveEthernetWith4096Mtu) {
  ibv_port_attr port{};
  ASSERT_EQ(ibv_query_port(ctx(), kPort, &port), 0);
  EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(port.active_mtu, IBV_MTU_4096);
  EXPECT_EQ(port.max_mtu, IBV_MTU_4096);
  EXPECT_GE(port.gid_tbl_len, 2);
}

TEST_F(DeviceTest, QueryPortOfAMissingPortFailsWithEinval) {
  ibv_port_attr port{};
  EXPECT_EQ(ibv_query_port(ctx(), 2, &port), EINVAL);
  EXPECT_EQ(ibv_query_port(ctx(), 0, &port), EINVAL);
}

bool is_ipv4_mapped(const ibv_gid& g) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(g.raw, kPrefix, sizeof kPrefix) == 0;
}

bool is_zero(const ibv_gid& g) {
  return std::all_of(std::begin(g.raw), std::end(g.raw), [](uint8_t b) { return b == 0; });
}

TEST_F(DeviceTest, GidQueriesAgreeAndEndWithLoopback) {
  ibv_port_attr port{};
  ASSERT_EQ(ibv_query_port(ctx(), kPort, &port), 0);
  std::vector<ibv_gid_entry> table(static_cast<size_t>(port.gid_tbl_len));
  const ssize_t n = ibv_query_gid_table(ctx(), table.data(), table.size(), 0);
  ASSERT_GE(n, 1);
  ASSERT_LT(n, port.gid_tbl_len);  // the test below needs one empty entry

  // Too small a table is refused as a whole.
  EXPECT_EQ(ibv_query_gid_table(ctx(), table.data(), static_cast<size_t>(n - 1), 0), -EINVAL);

  for (uint32_t i = 0; i < static_cast<uint32_t>(n); ++i) {
    SCOPED_TRACE(i);
    ibv_gid legacy{};
    ASSERT_EQ(ibv_query_gid(ctx(), kPort, static_cast<int>(i), &legacy), 0);
    ibv_gid_entry entry{};
    ASSERT_EQ(ibv_query_gid_ex(ctx(), kPort, i, &entry, 0), 0);
    EXPECT_EQ(std::memcmp(legacy.raw, entry.gid.raw, 16), 0);
    EXPECT_EQ(std::memcmp(legacy.raw, table[i].gid.raw, 16), 0);
    EXPECT_EQ(entry.gid_index, i);
    EXPECT_EQ(table[i].gid_index, i);
    EXPECT_EQ(entry.port_num, kPort);
    EXPECT_EQ(table[i].port_num, kPort);
    EXPECT_EQ(entry.gid_type, IBV_GID_TYPE_ROCE_V2);
    EXPECT_EQ(table[i].gid_type, IBV_GID_TYPE_ROCE_V2);
    EXPECT_TRUE(is_ipv4_mapped(legacy));
  }

  // GID 0 is the fixture's, ::ffff:a.b.c.d; the last populated one is ::ffff:127.0.0.1.
  EXPECT_EQ(std::memcmp(table[0].gid.raw, gid0().raw, 16), 0);
  const ibv_gid& last = table[static_cast<size_t>(n - 1)].gid;
  ASSERT_TRUE(is_ipv4_mapped(last));
  uint32_t addr = 0;
  std::memcpy(&addr, last.raw + 12, 4);
  EXPECT_EQ(ntohl(addr), 0x7f000001u);

  // The first empty index: no data in the extended query, the zero GID in the legacy one.
  ibv_gid_entry entry{};
  EXPECT_EQ(ibv_query_gid_ex(ctx(), kPort, static_cast<uint32_t>(n), &entry, 0), ENODATA);
  ibv_gid empty{};
  std::memset(empty.raw, 0xaa, sizeof empty.raw);
  EXPECT_EQ(ibv_query_gid(ctx(), kPort, static_cast<int>(n), &empty), 0);
  EXPECT_TRUE(is_zero(empty));
  // Out of the table altogether, or on a missing port.
  EXPECT_EQ(ibv_query_gid_ex(ctx(), kPort, static_cast<uint32_t>(port.gid_tbl_len), &entry, 0),
            EINVAL);
  EXPECT_EQ(ibv_query_gid_ex(ctx(), 2, 0, &entry, 0), EINVAL);
  EXPECT_EQ(ibv_query_gid(ctx(), 2, 0, &empty), -1);
}

TEST_F(DeviceTest, OpensSeveralContexts) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  ASSERT_GE(n, 1);
  ContextPtr second(ibv_open_device(list[0]));
  ibv_free_device_list(list);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(second.get(), ctx());
  ibv_gid g{};
  ASSERT_EQ(ibv_query_gid(second.get(), kPort, 0, &g), 0);
  EXPECT_EQ(std::memcmp(g.raw, gid0().raw, 16), 0);
}

// ibv_copy_path_rec_to_kern / _from_kern: every field of a path record survives the
// kernel's layout and back, GIDs and the fields whose integer types differ included.
TEST(PathRecord, EveryFieldSurvivesTheKernelLayoutBothWays) {
  ibv_sa_path_rec rec{};
  for (uint8_t i = 0; i < 16; ++i) {
    rec.dgid.raw[i] = static_cast<uint8_t>(0x10 + i);
    rec.sgid.raw[i] = static_cast<uint8_t>(0x80 + i);
  }
  rec.dlid = htons(0x1234);
  rec.slid = htons(0x5678);
  rec.raw_traffic = 1;
  rec.flow_label = htonl(0xABCDE);
  rec.reversible = 1;
  rec.mtu = IBV_MTU_4096;
  rec.pkey = htons(0xFFFF);
  rec.hop_limit = 64;
  rec.traffic_class = 0x2E;
  rec.numb_path = 1;
  rec.sl = 5;
  rec.mtu_selector = 2;
  rec.rate_selector = 2;
  rec.rate = 7;
  rec.packet_life_time_selector = 2;
  rec.packet_life_time = 18;
  rec.preference = 3;
  ib_user_path_rec kern{};
  ibv_copy_path_rec_to_kern(&kern, &rec);
  EXPECT_EQ(std::memcmp(kern.dgid, rec.dgid.raw, 16), 0);
  EXPECT_EQ(kern.dlid, rec.dlid);
  EXPECT_EQ(kern.mtu, IBV_MTU_4096);
  EXPECT_EQ(kern.packet_life_time, 18);
  ibv_sa_path_rec back{};
  ibv_copy_path_rec_from_kern(&back, &kern);
  EXPECT_EQ(std::memcmp(&back, &rec, sizeof rec), 0);
}

}  // namespace
}  // namespace softrdma_test

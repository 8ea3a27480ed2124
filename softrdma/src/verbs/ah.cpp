// Address handles, including those built from a received UD completion's GRH.
#include <cerrno>
#include <cstring>

#include "common/export.hpp"
#include "verbs/device_limits.hpp"
#include "verbs/objects.hpp"

using namespace softrdma;

SOFTRDMA_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  // On an Ethernet link layer every address needs a GRH (RoCE): as on a real RoCE port.
  if (!attr || attr->port_num != limits::kPortNum || !attr->is_global ||
      attr->grh.sgid_index >= to_ctx(pd->context)->gids.populated()) {
    errno = EINVAL;
    return nullptr;
  }
  auto* ah = new (std::nothrow) Ah();
  if (!ah) {
    errno = ENOMEM;
    return nullptr;
  }
  ah->ah.context = pd->context;
  ah->ah.pd = pd;
  ah->attr = *attr;
  std::memcpy(ah->dgid.data(), attr->grh.dgid.raw, 16);
  to_pd(pd)->users.fetch_add(1);
  return &ah->ah;
}

SOFTRDMA_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
  to_pd(ah->pd)->users.fetch_sub(1);
  delete to_ah(ah);
  return 0;
}

SOFTRDMA_EXPORT int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc,
                                        ibv_grh* grh, ibv_ah_attr* ah_attr) {
  if (port_num != limits::kPortNum || !(wc->wc_flags & IBV_WC_GRH) || !grh) {
    errno = EINVAL;
    return -1;
  }
  std::memset(ah_attr, 0, sizeof *ah_attr);
  ah_attr->port_num = port_num;
  ah_attr->is_global = 1;
  ah_attr->grh.hop_limit = 64;
  Gid source{}, dest{};
  const auto* raw = reinterpret_cast<const uint8_t*>(grh);
  if (raw[20] == 0x45) {  // RoCE v2 over IPv4: the IPv4 header sits in the last 20 bytes
    uint32_t src, dst;
    std::memcpy(&src, raw + 32, 4);
    std::memcpy(&dst, raw + 36, 4);
    source = GidTable::from_ipv4(src);
    dest = GidTable::from_ipv4(dst);
  } else {
    std::memcpy(source.data(), grh->sgid.raw, 16);
    std::memcpy(dest.data(), grh->dgid.raw, 16);
  }
  std::memcpy(ah_attr->grh.dgid.raw, source.data(), 16);
  // Reply from the GID the request was sent to.
  const GidTable& gids = to_ctx(context)->gids;
  for (uint32_t i = 0; i < gids.populated(); ++i)
    if (gids.at(i) == dest) ah_attr->grh.sgid_index = static_cast<uint8_t>(i);
  return 0;
}

SOFTRDMA_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh,
                                              uint8_t port_num) {
  ibv_ah_attr attr;
  if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr) != 0) return nullptr;
  return ibv_create_ah(pd, &attr);
}

SOFTRDMA_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, uint8_t eth_mac[6],
                                                uint16_t* vid) {
  // There is no Ethernet underneath: a fixed locally administered MAC, no VLAN.
  static constexpr uint8_t kMac[6] = {0x02, 0, 0, 0, 0, 1};
  std::memcpy(eth_mac, kMac, sizeof kMac);
  if (vid) *vid = 0xffff;
  return 0;
}

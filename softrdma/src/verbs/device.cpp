// Device discovery, opening, and the device and port queries.
#include <endian.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "common/export.hpp"
#include "common/log.hpp"
#include "common/process_identity.hpp"
#include "verbs/device_limits.hpp"
#include "verbs/objects.hpp"
#include "verbs/ops.hpp"

#undef ibv_query_port

namespace softrdma {
namespace {

uint64_t host_guid() {
  // Stable for a host (machine id) and distinct per network namespace ("host" in tests).
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  };
  char id[64] = {};
  if (FILE* f = std::fopen("/etc/machine-id", "r")) {
    [[maybe_unused]] size_t n = std::fread(id, 1, sizeof id - 1, f);
    std::fclose(f);
  }
  mix(id, sizeof id);
  const uint64_t ns = self_netns();
  mix(&ns, sizeof ns);
  return h & ~0xffull;  // low byte free, as on NICs whose ports add to it
}

Device& the_device() {
  static Device* dev = [] {
    auto* d = new Device();
    d->device.node_type = IBV_NODE_CA;
    d->device.transport_type = IBV_TRANSPORT_IB;
    std::snprintf(d->device.name, sizeof d->device.name, "%s", limits::kDeviceName);
    std::snprintf(d->device.dev_name, sizeof d->device.dev_name, "uverbs0");
    std::snprintf(d->device.dev_path, sizeof d->device.dev_path, "/dev/infiniband/uverbs0");
    std::snprintf(d->device.ibdev_path, sizeof d->device.ibdev_path, "/sys/class/infiniband/%s",
                  limits::kDeviceName);
    return d;
  }();
  return *dev;
}

void fill_device_attr(ibv_device_attr& a) {
  std::memset(&a, 0, sizeof a);
  std::snprintf(a.fw_ver, sizeof a.fw_ver, "%s", limits::kFirmware);
  a.node_guid = htobe64(host_guid());
  a.sys_image_guid = a.node_guid;
  a.max_mr_size = limits::kMaxMrSize;
  a.page_size_cap = 0xfffff000;
  a.vendor_id = limits::kVendorId;
  a.vendor_part_id = limits::kVendorPartId;
  a.hw_ver = 1;
  a.max_qp = static_cast<int>(Registry::kQpCapacity);
  a.max_qp_wr = limits::kMaxQpWr;
  a.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SYS_IMAGE_GUID |
                       IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_MEM_WINDOW |
                       IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_XRC;
  a.max_sge = limits::kMaxSge;
  a.max_sge_rd = limits::kMaxSge;
  a.max_cq = 16384;
  a.max_cqe = limits::kMaxCqe;
  a.max_mr = static_cast<int>(Registry::kMrCapacity);
  a.max_mw = static_cast<int>(Registry::kMrCapacity);  // windows share the key table
  a.max_mcast_grp = static_cast<int>(limits::kMaxMcastGroups);
  a.max_mcast_qp_attach = static_cast<int>(limits::kMaxMcastQpAttach);
  a.max_total_mcast_qp_attach = static_cast<int>(Registry::kMcastCapacity);
  a.max_pd = 65536;
  a.max_qp_rd_atom = limits::kMaxQpRdAtom;
  a.max_res_rd_atom = limits::kMaxQpRdAtom * a.max_qp;
  a.max_qp_init_rd_atom = limits::kMaxQpRdAtom;
  a.atomic_cap = IBV_ATOMIC_HCA;
  a.max_srq = 4096;
  a.max_srq_wr = limits::kMaxSrqWr;
  a.max_srq_sge = limits::kMaxSge;
  a.max_ah = 65536;
  a.max_pkeys = 1;
  a.local_ca_ack_delay = 15;
  a.phys_port_cnt = 1;
}

void fill_port_attr(ibv_port_attr& p, const Context& ctx) {
  std::memset(&p, 0, sizeof p);
  p.state = IBV_PORT_ACTIVE;
  p.max_mtu = limits::kMtu;
  p.active_mtu = limits::kMtu;
  p.gid_tbl_len = GidTable::kLength;
  p.port_cap_flags = IBV_PORT_CM_SUP;
  p.max_msg_sz = limits::kMaxMsgSize;
  p.pkey_tbl_len = 1;
  p.max_vl_num = 1;
  p.active_width = 2;   // 4x
  p.active_speed = 32;  // EDR
  p.phys_state = 5;     // LinkUp
  p.link_layer = IBV_LINK_LAYER_ETHERNET;
  (void)ctx;
}

int query_port_op(ibv_context* context, uint8_t port, ibv_port_attr* attr, size_t len) {
  if (port != limits::kPortNum || !attr) return EINVAL;
  ibv_port_attr full;
  fill_port_attr(full, *to_ctx(context));
  std::memset(attr, 0, len);
  std::memcpy(attr, &full, std::min(len, sizeof full));
  return 0;
}

int query_device_ex_op(ibv_context*, const ibv_query_device_ex_input* input,
                       ibv_device_attr_ex* attr, size_t attr_size) {
  if (input && input->comp_mask) return EINVAL;
  if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
  ibv_device_attr_ex full;
  std::memset(&full, 0, sizeof full);
  fill_device_attr(full.orig_attr);
  full.phys_port_cnt_ex = 1;
  full.device_cap_flags_ex = full.orig_attr.device_cap_flags;
  // On-demand paging: softrdma pins nothing, so every operation of every QP type may use
  // an on-demand region, and the implicit one (verbs/mr.cpp).
  constexpr uint32_t kAllOps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                               IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
                               IBV_ODP_SUPPORT_SRQ_RECV;
  full.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
  full.odp_caps.per_transport_caps.rc_odp_caps = kAllOps;
  full.odp_caps.per_transport_caps.uc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
                                                 IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_SRQ_RECV;
  full.odp_caps.per_transport_caps.ud_odp_caps =
      IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
  full.xrc_odp_caps = kAllOps;
  std::memset(attr, 0, attr_size);
  std::memcpy(attr, &full, std::min(attr_size, sizeof full));
  return 0;
}

}  // namespace

const GidTable& context_gids(ibv_context* context) {
  return to_ctx(context)->gids;
}

}  // namespace softrdma

using namespace softrdma;

SOFTRDMA_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
  auto** list = static_cast<ibv_device**>(std::calloc(2, sizeof(ibv_device*)));
  if (!list) {
    errno = ENOMEM;
    return nullptr;
  }
  list[0] = &the_device().device;
  if (num_devices) *num_devices = 1;
  return list;
}

SOFTRDMA_EXPORT void ibv_free_device_list(ibv_device** list) {
  std::free(list);
}

SOFTRDMA_EXPORT const char* ibv_get_device_name(ibv_device* device) {
  return device->name;
}

SOFTRDMA_EXPORT __be64 ibv_get_device_guid(ibv_device*) {
  return htobe64(host_guid());
}

SOFTRDMA_EXPORT int ibv_get_device_index(ibv_device*) {
  return 0;
}

SOFTRDMA_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  if (device != &the_device().device) {
    errno = ENODEV;
    return nullptr;
  }
  try {
    Arena& arena = Arena::self();
    Registry::instance();
    auto* ctx = new Context();
    ctx->device = &the_device();
    ctx->gids = GidTable::from_host();
    ctx->shared_offset = arena.allocate(sizeof(ContextShared));
    if (!ctx->shared_offset) {
      delete ctx;
      errno = ENOMEM;
      return nullptr;
    }
    ctx->shared = arena.at<ContextShared>(ctx->shared_offset);
    ibv_context& c = ctx->vctx.context;
    c.device = device;
    c.cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    c.async_fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
    ctx->shared->async_eventfd = c.async_fd;
    c.num_comp_vectors = limits::kNumCompVectors;
    pthread_mutex_init(&c.mutex, nullptr);
    c.abi_compat = __VERBS_ABI_IS_EXTENDED;
    ctx->vctx.sz = sizeof(verbs_context);
    install_context_ops(ctx->vctx);
    ctx->vctx.query_port = query_port_op;
    ctx->vctx.query_device_ex = query_device_ex_op;
    return &c;
  } catch (const std::system_error& e) {
    // The registry cannot be used (another user made its file, say): say why, always.
    SOFTRDMA_NOTICE("%s cannot be opened: %s", device->name, e.what());
    errno = e.code().value() ? e.code().value() : ENOMEM;
    return nullptr;
  } catch (const std::exception& e) {
    SOFTRDMA_DEBUG_LOG("ibv_open_device: %s", e.what());
    errno = ENOMEM;
    return nullptr;
  }
}

SOFTRDMA_EXPORT int ibv_close_device(ibv_context* context) {
  Context* ctx = to_ctx(context);
  close(context->cmd_fd);
  close(context->async_fd);
  Arena::self().free(ctx->shared_offset);
  delete ctx;
  return 0;
}

SOFTRDMA_EXPORT int ibv_query_device(ibv_context*, ibv_device_attr* attr) {
  if (!attr) return EINVAL;
  fill_device_attr(*attr);
  return 0;
}

// The exported symbol fills the layout that predates ibv_port_attr's trailing fields; the
// header's inline ibv_query_port uses the context's query_port op instead.
SOFTRDMA_EXPORT int ibv_query_port(ibv_context* context, uint8_t port,
                                   _compat_ibv_port_attr* compat_attr) {
  return query_port_op(context, port, reinterpret_cast<ibv_port_attr*>(compat_attr),
                       offsetof(ibv_port_attr, flags));
}

SOFTRDMA_EXPORT int ibv_query_pkey(ibv_context*, uint8_t port, int index, __be16* pkey) {
  if (port != limits::kPortNum || index != 0 || !pkey) {
    errno = EINVAL;
    return -1;
  }
  *pkey = htobe16(0xffff);
  return 0;
}

SOFTRDMA_EXPORT int ibv_get_pkey_index(ibv_context*, uint8_t port, __be16 pkey) {
  if (port != limits::kPortNum || (be16toh(pkey) & 0x7fff) != 0x7fff) {
    errno = ENOENT;
    return -1;
  }
  return 0;
}

SOFTRDMA_EXPORT ibv_context* ibv_import_device(int) {
  errno = EOPNOTSUPP;
  return nullptr;
}

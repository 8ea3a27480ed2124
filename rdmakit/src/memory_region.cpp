#include "rdmakit/memory_region.hpp"

#include <cerrno>
#include <cstdio>

#include "rdmakit/error.hpp"

namespace rdmakit {

std::string to_string(Access access) {
  std::string out;
  auto add = [&](Access bit, const char* name) {
    if ((access & bit) != Access::none) out += out.empty() ? name : std::string("|") + name;
  };
  add(Access::local_write, "local_write");
  add(Access::remote_write, "remote_write");
  add(Access::remote_read, "remote_read");
  add(Access::remote_atomic, "remote_atomic");
  return out.empty() ? "none" : out;
}

ProtectionDomain::ProtectionDomain(const Context& context) {
  std::shared_ptr<ibv_context> ctx = context.handle();
  ibv_pd* pd = ibv_alloc_pd(ctx.get());
  if (!pd) throw_verbs_error("ibv_alloc_pd", errno, context.name());
  pd_ = std::shared_ptr<ibv_pd>(pd, [ctx](ibv_pd* p) { ibv_dealloc_pd(p); });
}

ibv_pd* ProtectionDomain::get() const {
  RDMAKIT_REQUIRE(pd_ != nullptr, "use of a moved-from rdmakit::ProtectionDomain");
  return pd_.get();
}

const std::shared_ptr<ibv_pd>& ProtectionDomain::handle() const {
  get();
  return pd_;
}

MemoryRegion ProtectionDomain::register_memory(void* data, size_t size, Access access,
                                               std::error_code& ec) const {
  ibv_mr* mr = ibv_reg_mr(get(), data, size, static_cast<int>(access));
  if (!mr) {
    ec = verbs_error(errno);
    return {};
  }
  ec.clear();
  return MemoryRegion(mr, access, pd_);
}

MemoryRegion ProtectionDomain::register_memory(void* data, size_t size, Access access) const {
  std::error_code ec;
  MemoryRegion mr = register_memory(data, size, access, ec);
  if (ec) {
    char object[128];
    std::snprintf(object, sizeof object, "[%p, +%zu) with access %s", data, size,
                  to_string(access).c_str());
    throw_verbs_error("ibv_reg_mr", ec.value(), object);
  }
  return mr;
}

MemoryRegion::MemoryRegion(MemoryRegion&& other) noexcept
    : mr_(std::exchange(other.mr_, nullptr)), access_(other.access_), pd_(std::move(other.pd_)) {}

MemoryRegion& MemoryRegion::operator=(MemoryRegion&& other) noexcept {
  if (this != &other) {
    if (mr_) ibv_dereg_mr(mr_);
    mr_ = std::exchange(other.mr_, nullptr);
    access_ = other.access_;
    pd_ = std::move(other.pd_);
  }
  return *this;
}

MemoryRegion::~MemoryRegion() {
  if (mr_) ibv_dereg_mr(mr_);
}

ibv_mr* MemoryRegion::get() const {
  RDMAKIT_REQUIRE(mr_ != nullptr, "use of an empty or moved-from rdmakit::MemoryRegion");
  return mr_;
}

}  // namespace rdmakit

#include "ring/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <new>
#include <utility>

#include "rdmakit/rpc/status.hpp"

namespace rdmakit::rpc::detail {
namespace {

size_t page_size() noexcept {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}
size_t whole_pages(size_t bytes) noexcept {
  return (bytes + page_size() - 1) & ~(page_size() - 1);
}
constexpr size_t kColorStride = 128;
constexpr size_t kHeaderArea = 8192;
static_assert((Segment::kColors - 1) * kColorStride + sizeof(SegmentHeader) <= kHeaderArea,
              "every color's header fits the header area");
static_assert(Segment::start_position(Segment::kColors - 1) < 4096,
              "every color starts within the smallest ring");
// The header (at its color's place in the header area) and the release counters after it,
// mapped once, before the rings.
size_t counters_offset() noexcept {
  return whole_pages(kHeaderArea);
}
size_t front_bytes(uint32_t window) noexcept {
  return whole_pages(counters_offset() +
                     size_t{kRings} * out_of_line_slots(window) * sizeof(SharedCounter));
}
size_t file_bytes(const Segment::Layout& layout) noexcept {
  return front_bytes(layout.window) + size_t{kRings} * layout.ring_bytes;
}
std::error_code last_error() noexcept {
  return {errno, std::system_category()};
}

}  // namespace

uint32_t Segment::next_color() noexcept {
  static std::atomic<uint32_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed) % kColors;
}

uint32_t Segment::round_ring_bytes(uint32_t bytes) noexcept {
  // A power of two (positions wrap with a mask) and at least a page (it is mapped twice).
  return std::bit_ceil(std::max<uint32_t>(bytes, static_cast<uint32_t>(page_size())));
}

Segment Segment::map_file(int fd, const Layout& layout, std::error_code& error) {
  // Reserve the address range first, then map the front once and every ring twice into it.
  Segment s;
  const uint32_t ring_bytes = layout.ring_bytes;
  const size_t front = front_bytes(layout.window);
  s.reserved_ = front + size_t{kRings} * 2 * ring_bytes;
  void* base = mmap(nullptr, s.reserved_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    error = last_error();
    s.reserved_ = 0;
    return s;
  }
  s.base_ = static_cast<std::byte*>(base);
  s.header_ = s.base_ + layout.color % kColors * kColorStride;
  s.ring_bytes_ = ring_bytes;
  s.front_bytes_ = front;
  s.layout_ = layout;
  s.slots_ = out_of_line_slots(layout.window);
  auto fixed = [&](std::byte* at, size_t length, size_t offset) {
    void* got = mmap(at, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                     static_cast<off_t>(offset));
    return got != MAP_FAILED;
  };
  bool ok = fixed(s.base_, front, 0);
  for (int r = 0; ok && r < kRings; ++r) {
    std::byte* first = s.ring(r);
    const size_t offset = front + size_t(r) * ring_bytes;
    ok = fixed(first, ring_bytes, offset) && fixed(first + ring_bytes, ring_bytes, offset);
  }
  if (!ok) {
    error = last_error();
    return Segment{};  // `s` unmaps what was mapped
  }
  return s;
}

Segment Segment::create(const Layout& layout, int& fd, std::error_code& error) {
  fd = memfd_create("rdmakit-rpc", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    error = last_error();
    return {};
  }
  const size_t bytes = file_bytes(layout);
  // Sealed so that a peer can neither shrink it (our accesses would fault) nor grow it.
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    error = last_error();
    close(fd);
    fd = -1;
    return {};
  }
  Segment s = map_file(fd, layout, error);
  if (!s) {
    close(fd);
    fd = -1;
    return s;
  }
  SegmentHeader& h = *new (s.header_) SegmentHeader{};
  h.magic = kSegmentMagic;
  h.ring_bytes = layout.ring_bytes;
  h.window = layout.window;
  h.max_message_bytes = layout.max_message_bytes;
  h.color = layout.color;
  for (int r = 0; r < kRings; ++r) {
    h.tail[r].value = start_position(layout.color);
    h.released[r].value = start_position(layout.color);
  }
  return s;
}

Segment Segment::map(int fd, const Layout& expected, std::error_code& error) {
  struct stat st {};
  const int seals = fcntl(fd, F_GET_SEALS);
  if (fstat(fd, &st) != 0 || seals < 0) {
    error = last_error();
    return {};
  }
  if ((seals & F_SEAL_SHRINK) == 0 ||
      round_ring_bytes(expected.ring_bytes) != expected.ring_bytes || expected.window == 0 ||
      static_cast<size_t>(st.st_size) != file_bytes(expected)) {
    error = make_error_code(Errc::protocol_error);
    return {};
  }
  Segment s = map_file(fd, expected, error);
  if (!s) return s;
  const SegmentHeader& h = s.header();
  if (h.magic != kSegmentMagic || h.ring_bytes != expected.ring_bytes ||
      h.window != expected.window || h.max_message_bytes != expected.max_message_bytes ||
      h.color != expected.color) {
    error = make_error_code(Errc::protocol_error);
    return {};
  }
  return s;
}

Segment::Segment(Segment&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      header_(other.header_),
      reserved_(std::exchange(other.reserved_, 0)),
      ring_bytes_(other.ring_bytes_),
      front_bytes_(other.front_bytes_),
      layout_(other.layout_),
      slots_(other.slots_) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    this->~Segment();
    new (this) Segment(std::move(other));
  }
  return *this;
}

Segment::~Segment() {
  if (base_ != nullptr) munmap(base_, reserved_);
}

std::byte* Segment::ring(int index) const noexcept {
  return base_ + front_bytes_ + size_t(index) * 2 * ring_bytes_;
}

SharedCounter* Segment::released_counters(int index) const noexcept {
  auto* first = reinterpret_cast<SharedCounter*>(base_ + counters_offset());
  return first + size_t(index) * slots_;
}

}  // namespace rdmakit::rpc::detail

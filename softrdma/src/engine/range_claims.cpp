#include "engine/range_claims.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

#include "common/secure_random.hpp"
#include "common/softrdma_port.hpp"

namespace softrdma {
namespace {

constexpr const char* kClaimsDir = "/dev/shm";
// The claims of one layout version: "softrdma-range-v<layout>-<range>-<uid>-<16 hex>".
constexpr uint32_t kClaimsVersion = 2;

struct ClaimFile {
  std::string name;
  uint32_t range;
  uint32_t uid;
};

std::string path_of(const std::string& name) {
  return std::string(kClaimsDir) + "/" + name;
}

// Parses a claim file's name; false if it is no claim of this version.
bool parse(const char* name, ClaimFile& out) {
  unsigned version = 0, range = 0, uid = 0;
  char tag[17] = {};
  int used = 0;
  if (std::sscanf(name, "softrdma-range-v%u-%u-%u-%16[0-9a-f]%n", &version, &range, &uid, tag,
                  &used) != 4 ||
      name[used] != '\0' || version != kClaimsVersion || std::strlen(tag) != 16)
    return false;
  out = {name, range, uid};
  return true;
}

// The registry a claim of this user names ("" if it cannot be read as one).
std::string claimed_registry(const std::string& name) {
  char text[256] = {};
  const int fd = open(path_of(name).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  const ssize_t n = fd < 0 ? -1 : read(fd, text, sizeof text - 1);
  if (fd >= 0) close(fd);
  return n > 0 ? std::string(text, static_cast<size_t>(n)) : std::string();
}

bool is_candidate(uint32_t uid, uint32_t range, uint32_t ranges) {
  for (uint32_t k = 0; k < kRangeCandidates; ++k)
    if (candidate_range(uid, k, ranges) == range) return true;
  return false;
}

// Every claim in the directory that counts: a regular file, owned by the user its name says,
// of one of that user's candidates. This user's claims whose registry file is gone are
// removed on the way; one naming `registry` is returned in `mine`.
std::vector<ClaimFile> claims(uint32_t ranges, const std::string& registry, ClaimFile* mine) {
  std::vector<ClaimFile> found;
  DIR* dir = opendir(kClaimsDir);
  if (!dir) return found;
  const uint32_t me = static_cast<uint32_t>(geteuid());
  while (const dirent* entry = readdir(dir)) {
    ClaimFile c;
    if (!parse(entry->d_name, c) || c.range >= ranges) continue;
    struct stat st {};
    if (fstatat(dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != c.uid || !is_candidate(c.uid, c.range, ranges))
      continue;  // not a claim: made by someone else under another's name, or off its list
    if (c.uid == me) {
      const std::string named = claimed_registry(c.name);
      struct stat registry_st {};
      if (named.empty() || (stat(named.c_str(), &registry_st) != 0 && errno == ENOENT)) {
        unlinkat(dirfd(dir), entry->d_name, 0);  // its registry is gone
        continue;
      }
      if (mine && named == registry) *mine = c;
    }
    found.push_back(c);
  }
  closedir(dir);
  return found;
}

// A new claim file of range `range` naming `registry`; its name, or "" if it could not be
// made.
std::string make_claim(uint32_t range, const std::string& registry) {
  char name[96];
  std::snprintf(name, sizeof name, "softrdma-range-v%u-%u-%u-%016" PRIx64, kClaimsVersion, range,
                static_cast<uint32_t>(geteuid()), secure_random_u64());
  const int fd =
      open(path_of(name).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return "";
  const bool written =
      write(fd, registry.data(), registry.size()) == static_cast<ssize_t>(registry.size());
  close(fd);
  if (!written) {
    unlink(path_of(name).c_str());
    return "";
  }
  return name;
}

bool claim_holds(const RangeClaim& claim, const std::string& registry) {
  if (!claim.held) return false;
  struct stat st {};
  return lstat(path_of(claim.name).c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         st.st_uid == geteuid() && claimed_registry(claim.name) == registry;
}

void record(RangeClaim& claim, const ClaimFile& c) {
  std::snprintf(claim.name, sizeof claim.name, "%s", c.name.c_str());
  claim.range = c.range;
  claim.held = 1;
}

}  // namespace

uint32_t candidate_range(uint32_t uid, uint32_t k, uint32_t ranges) {
  // splitmix64's finaliser of (uid, k): a fixed sequence per user, spread over the ranges.
  uint64_t x = (uint64_t{uid} << 32 | k) + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<uint32_t>(x % ranges);
}

uint32_t claim_qpn_range(const std::string& registry, RangeClaim& claim, uint32_t ranges) {
  ProcessLockGuard guard(claim.lock);
  if (claim_holds(claim, registry)) return claim.range;
  claim.held = 0;
  const uint32_t me = static_cast<uint32_t>(geteuid());
  for (uint32_t k = 0; k < kRangeCandidates; ++k) {
    ClaimFile mine{};
    std::vector<ClaimFile> all = claims(ranges, registry, &mine);
    if (!mine.name.empty()) {  // made by a process of this registry before the header said so
      record(claim, mine);
      return mine.range;
    }
    const uint32_t range = candidate_range(me, k, ranges);
    const auto taken = [&](const std::vector<ClaimFile>& list, const std::string& except) {
      for (const ClaimFile& c : list)
        if (c.range == range && c.name != except) return true;
      return false;
    };
    // A range whose port another program holds would leave the registry's QPs unreachable.
    if (taken(all, "") || port_held_by_another(port_of_range(range))) continue;
    const std::string name = make_claim(range, registry);
    if (name.empty()) continue;
    if (taken(claims(ranges, registry, nullptr), name)) {
      // Another claimer took it at the same moment: both look further, after a pause of
      // their own so that two of one user do not meet again on the next candidate.
      unlink(path_of(name).c_str());
      std::this_thread::sleep_for(std::chrono::microseconds(secure_random_u32() % 2000));
      continue;
    }
    record(claim, {name, range, me});
    return range;
  }
  throw std::system_error(ENOSPC, std::generic_category(),
                          "no free QP number range among this user's candidates");
}

}  // namespace softrdma

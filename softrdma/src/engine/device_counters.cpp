#include "engine/device_counters.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "engine/registry.hpp"

namespace softrdma {
namespace {

constexpr size_t kCounters = static_cast<size_t>(Counter::kCount);

// This process's writes of the counter files: when each was written last, and which it
// counted since (written at exit).
struct Files {
  std::mutex mutex;
  std::chrono::steady_clock::time_point written[kCounters];
  bool dirty[kCounters] = {};
  bool exit_hook = false;
};

Files& files() {
  static auto* f = new Files;  // used by the exit handler
  return *f;
}

// The directory of the counter files, made owner-only if missing; "" when it is not this
// user's alone (another user made it, or it is a link).
std::string counters_dir() {
  const std::string dir = Registry::instance().path() + ".counters";
  mkdir(dir.c_str(), 0700);
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    return "";
  return dir;
}

// Rewrites counter `c`'s file whole (a reader sees the old value or the new one).
void write_file(const std::string& dir, size_t c) {
  const std::string name = counter_name(static_cast<Counter>(c));
  const std::string path = dir + "/" + name;
  const std::string staging = dir + "/." + name + "." + std::to_string(getpid());
  const int fd = open(staging.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return;
  char text[32];
  const int n = std::snprintf(text, sizeof text, "%llu\n",
                              static_cast<unsigned long long>(counted(static_cast<Counter>(c))));
  const bool written = n > 0 && write(fd, text, static_cast<size_t>(n)) == n;
  close(fd);
  if (!written || rename(staging.c_str(), path.c_str()) != 0) unlink(staging.c_str());
}

void write_dirty_files() {
  Files& f = files();
  std::lock_guard lock(f.mutex);
  const std::string dir = counters_dir();
  for (size_t c = 0; c < kCounters; ++c)
    if (f.dirty[c] && !dir.empty()) write_file(dir, c);
}

}  // namespace

const char* counter_name(Counter c) {
  switch (c) {
    case Counter::kForeignRequests:
      return "foreign_requests";
    case Counter::kOutOfSequence:
      return "out_of_sequence";
    case Counter::kDuplicateRequests:
      return "duplicate_request";
    case Counter::kBadHellos:
      return "bad_hellos";
    case Counter::kRemoteAccessErrors:
      return "resp_remote_access_errors";
    case Counter::kPeersRefused:
      return "peers_refused";
    case Counter::kCount:
      break;
  }
  return "unknown";
}

void count(Counter c) {
  const size_t i = static_cast<size_t>(c);
  Registry::instance().counters().values[i].fetch_add(1, std::memory_order_relaxed);
  // The file follows, at most once a millisecond: a flood of refused requests costs a file
  // write per millisecond, not per request. What is left is written at exit.
  constexpr auto kEvery = std::chrono::milliseconds(1);
  Files& f = files();
  std::lock_guard lock(f.mutex);
  if (!f.exit_hook) {
    f.exit_hook = true;
    std::atexit(write_dirty_files);
  }
  const auto now = std::chrono::steady_clock::now();
  if (now - f.written[i] < kEvery) {
    f.dirty[i] = true;
    return;
  }
  f.written[i] = now;
  f.dirty[i] = false;
  if (const std::string dir = counters_dir(); !dir.empty()) write_file(dir, i);
}

uint64_t counted(Counter c) {
  return Registry::instance().counters().values[static_cast<size_t>(c)].load(
      std::memory_order_relaxed);
}

std::string write_counter_files() {
  const std::string dir = counters_dir();
  if (!dir.empty())
    for (size_t c = 0; c < kCounters; ++c) write_file(dir, c);
  return dir;
}

}  // namespace softrdma

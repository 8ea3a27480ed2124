// A client process that scribbles into the shared memory of its session: the server checks
// every position, length and header it reads there, closes that session, and goes on serving
// everyone else (run under ASan too: no access outside the rings).
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/frame.hpp"
#include "ring/segment.hpp"
#include "rpc_fixture.hpp"
#include "shm/unix_socket.hpp"

using namespace rdmakit::rpc;
using namespace rdmakit::rpc::testing;
namespace detail = rdmakit::rpc::detail;

namespace {

// The mappings of this process's session memory files: (address, length, file offset).
struct Mapping {
  std::byte* address;
  size_t length;
  size_t offset;
};
std::vector<Mapping> session_mappings() {
  std::vector<Mapping> found;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find("memfd:rdmakit-rpc ") == std::string::npos) continue;
    std::istringstream in(line);
    std::string range, perms, offset;
    in >> range >> perms >> offset;
    const size_t dash = range.find('-');
    const auto begin = std::stoull(range.substr(0, dash), nullptr, 16);
    const auto end = std::stoull(range.substr(dash + 1), nullptr, 16);
    found.push_back(
        {reinterpret_cast<std::byte*>(begin), end - begin, std::stoull(offset, nullptr, 16)});
  }
  return found;
}

enum class Attack {
  tail_beyond_ring,
  tail_backwards,
  oversized_frame,
  bad_kind,
  forged_out_of_line,
  garbage
};

std::string attack_name(const ::testing::TestParamInfo<Attack>& info) {
  switch (info.param) {
    case Attack::tail_beyond_ring:
      return "TailBeyondRing";
    case Attack::tail_backwards:
      return "TailBackwards";
    case Attack::oversized_frame:
      return "OversizedFrame";
    case Attack::bad_kind:
      return "BadKind";
    case Attack::forged_out_of_line:
      return "ForgedOutOfLine";
    case Attack::garbage:
      return "Garbage";
  }
  return "unknown";
}

// Publishes one frame with `header` in the client's request ring, bypassing the library.
void publish_raw(detail::SegmentHeader& h, std::byte* ring, const detail::FrameHeader& header) {
  const int r = detail::ring_index(0, detail::Channel::request);
  const uint64_t tail = h.tail[r].value.load();
  std::memcpy(ring + (tail & (h.ring_bytes - 1)), &header, sizeof header);
  h.tail[r].value.store(tail + detail::frame_bytes(0));
}

void attack(Attack what) {
  std::vector<Mapping> maps = session_mappings();
  Mapping* header_map = nullptr;
  Mapping* request_ring = nullptr;
  for (Mapping& m : maps) {
    if (m.offset == 0) header_map = &m;
  }
  if (header_map == nullptr) _exit(3);
  // The header sits at its segment's color in the header area.
  detail::SegmentHeader* header = nullptr;
  for (size_t offset = 0; offset + sizeof(detail::SegmentHeader) <= 8192; offset += 64) {
    auto* candidate = reinterpret_cast<detail::SegmentHeader*>(header_map->address + offset);
    if (candidate->magic == detail::kSegmentMagic) header = candidate;
  }
  if (header == nullptr) _exit(5);
  auto& h = *header;
  // The client's request ring is ring 0, mapped right after the header page.
  for (Mapping& m : maps) {
    if (m.address == header_map->address + header_map->length) request_ring = &m;
  }
  if (request_ring == nullptr) _exit(4);
  const int r = detail::ring_index(0, detail::Channel::request);
  detail::FrameHeader frame{};
  frame.kind = detail::FrameKind::request;
  switch (what) {
    case Attack::tail_beyond_ring:
      h.tail[r].value.store(h.tail[r].value.load() + 10ull * h.ring_bytes);
      break;
    case Attack::tail_backwards:
      h.tail[r].value.store(h.tail[r].value.load() - 64);
      break;
    case Attack::oversized_frame:
      frame.length = 1u << 31;
      publish_raw(h, request_ring->address, frame);
      break;
    case Attack::bad_kind:
      frame.kind = static_cast<detail::FrameKind>(77);
      publish_raw(h, request_ring->address, frame);
      break;
    case Attack::forged_out_of_line:
      frame.length = h.ring_bytes;  // too big for the ring: "out of line", with no file sent
      frame.flags = detail::kOutOfLine;
      frame.out_of_line = 12345;
      publish_raw(h, request_ring->address, frame);
      break;
    case Attack::garbage: {
      std::mt19937_64 random(7);
      for (Mapping& m : maps) {
        auto* words = reinterpret_cast<uint64_t*>(m.address);
        for (size_t i = 0; i < m.length / 8; ++i) words[i] = random();
      }
      break;
    }
  }
}

class HostileShmClient : public ::testing::TestWithParam<Attack> {};

TEST_P(HostileShmClient, GetsItsSessionClosedWhileTheServerServesOthers) {
  std::vector<std::pair<SessionId, SessionEvent>> events;
  Options options;
  options.on_session = [&](SessionId s, SessionEvent e) { events.emplace_back(s, e); };
  Server server = Server::listen(fresh_url("shm"), options);
  int done[2];
  ASSERT_EQ(pipe(done), 0);
  ChildProcess child([&] {
    Client client = Client::connect(server.url());
    // One honest call first (the server accepts the session), then the attack.
    client.call(bytes("honest"), 1);
    client.poll([](const Response&) {});
    usleep(20000);
    attack(GetParam());
    const char c = 1;
    [[maybe_unused]] ssize_t n = write(done[1], &c, 1);
    for (;;) pause();
  });
  ASSERT_TRUE(child.started());
  char c = 0;
  // Serve while the child attacks.
  std::optional<SessionId> hostile;
  const auto start = std::chrono::steady_clock::now();
  bool attacked = false;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    server.poll();
    while (auto h = server.recv()) {
      hostile = h->session();
      EXPECT_FALSE(std::move(*h).reply(bytes("ok")));
    }
    if (!attacked) {
      pollfd p{done[0], POLLIN, 0};
      attacked = ::poll(&p, 1, 0) == 1 && read(done[0], &c, 1) == 1;
    }
    if (attacked && hostile && !server.is_open(*hostile)) break;
  }
  child.kill_and_reap();
  close(done[0]);
  close(done[1]);
  ASSERT_TRUE(attacked);
  ASSERT_TRUE(hostile.has_value());
  EXPECT_FALSE(server.is_open(*hostile)) << "the scribbling client's session is closed";
  expect_new_client_served(server);  // the server goes on
}

TEST(HostileShmConnections, SilentConnectionsNeitherHangNorBlockTheServer) {
  Server server = Server::listen(fresh_url("shm"));
  // Connections that never send their hello wait aside; the server goes on.
  std::vector<int> silent;
  for (int i = 0; i < 3; ++i) {
    const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::error_code error;
    const std::string path = detail::shm_socket_path(server.url().substr(6), error);
    ASSERT_FALSE(error);
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    ASSERT_EQ(connect(s, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    silent.push_back(s);
  }
  expect_new_client_served(server);
  for (int s : silent) close(s);
}

// Another user who makes this user's socket directory in the shared /tmp first (as
// /tmp/rdmakit-rpc-UID would be when XDG_RUNTIME_DIR is unset) cannot stop its servers: the
// directory is passed over for $HOME/.rdmakit-rpc, by server and client alike. Needs root to
// give the directory to another user (uid 65534 here).
TEST(HostileShmConnections, ASocketDirectoryAnotherUserMadeIsPassedOver) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a directory of another user";
  char tmp[] = "/tmp/rpc-squat-tmp-XXXXXX", home[] = "/tmp/rpc-squat-home-XXXXXX";
  ASSERT_NE(mkdtemp(tmp), nullptr);
  ASSERT_NE(mkdtemp(home), nullptr);
  const std::string squatted = std::string(tmp) + "/rdmakit-rpc-" + std::to_string(geteuid());
  ASSERT_EQ(mkdir(squatted.c_str(), 0777), 0);
  ASSERT_EQ(chown(squatted.c_str(), 65534, 65534), 0);
  ASSERT_EQ(chmod(squatted.c_str(), 0777), 0);
  const std::string saved_runtime =
      std::getenv("XDG_RUNTIME_DIR") ? std::getenv("XDG_RUNTIME_DIR") : "";
  const std::string saved_tmpdir = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "";
  const std::string saved_home = std::getenv("HOME") ? std::getenv("HOME") : "";
  unsetenv("XDG_RUNTIME_DIR");
  setenv("TMPDIR", tmp, 1);
  setenv("HOME", home, 1);
  {
    std::error_code error;
    const std::string path = detail::shm_socket_path("squat-test", error);
    EXPECT_FALSE(error) << error.message();
    EXPECT_EQ(path, std::string(home) + "/.rdmakit-rpc/squat-test");
    Server server = Server::listen(fresh_url("shm"));
    expect_new_client_served(server);
  }
  const auto restore = [](const char* name, const std::string& value) {
    if (value.empty())
      unsetenv(name);
    else
      setenv(name, value.c_str(), 1);
  };
  restore("XDG_RUNTIME_DIR", saved_runtime);
  restore("TMPDIR", saved_tmpdir);
  restore("HOME", saved_home);
  std::filesystem::remove_all(tmp);
  std::filesystem::remove_all(home);
}

INSTANTIATE_TEST_SUITE_P(Attacks, HostileShmClient,
                         ::testing::Values(Attack::tail_beyond_ring, Attack::tail_backwards,
                                           Attack::oversized_frame, Attack::bad_kind,
                                           Attack::forged_out_of_line, Attack::garbage),
                         attack_name);

}  // namespace

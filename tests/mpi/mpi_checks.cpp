// MPI programs a user of softrdma would run first, with their results checked: point-to-point
// latency and bandwidth between the first and the last rank (data verified), MPI_Allreduce of
// small and large vectors against the closed form, and one-sided MPI_Put/MPI_Get through a
// window. Rank 0 prints one line per check; the exit status is non-zero if any check fails.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int kLatencyRounds = 2000;
constexpr int kBandwidthBytes = 1 << 20;
constexpr int kBandwidthMessages = 64;

int rank_of(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}

int size_of(MPI_Comm comm) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  return n;
}

// The byte every rank expects at `i` of message `m` from `sender`.
uint8_t pattern(int sender, int m, size_t i) {
  return static_cast<uint8_t>(sender * 31 + m + i);
}

bool ping_pong(MPI_Comm comm, double& usec) {
  const int me = rank_of(comm), peer = size_of(comm) - 1;
  uint64_t value = 0;
  bool ok = true;
  MPI_Barrier(comm);
  const double start = MPI_Wtime();
  for (int i = 0; i < kLatencyRounds; ++i) {
    if (me == 0) {
      value = static_cast<uint64_t>(i);
      MPI_Send(&value, 1, MPI_UINT64_T, peer, 1, comm);
      MPI_Recv(&value, 1, MPI_UINT64_T, peer, 1, comm, MPI_STATUS_IGNORE);
      ok = ok && value == static_cast<uint64_t>(i) + 1;
    } else if (me == peer) {
      MPI_Recv(&value, 1, MPI_UINT64_T, 0, 1, comm, MPI_STATUS_IGNORE);
      ok = ok && value == static_cast<uint64_t>(i);
      ++value;
      MPI_Send(&value, 1, MPI_UINT64_T, 0, 1, comm);
    }
  }
  usec = (MPI_Wtime() - start) * 1e6 / (2.0 * kLatencyRounds);
  return ok;
}

bool bandwidth(MPI_Comm comm, double& mb_per_s) {
  const int me = rank_of(comm), peer = size_of(comm) - 1;
  std::vector<std::vector<uint8_t>> buffers(kBandwidthMessages,
                                            std::vector<uint8_t>(kBandwidthBytes));
  std::vector<MPI_Request> requests(kBandwidthMessages, MPI_REQUEST_NULL);
  bool ok = true;
  MPI_Barrier(comm);
  const double start = MPI_Wtime();
  if (me == 0) {
    for (int m = 0; m < kBandwidthMessages; ++m) {
      for (size_t i = 0; i < buffers[m].size(); ++i) buffers[m][i] = pattern(0, m, i);
      MPI_Isend(buffers[m].data(), kBandwidthBytes, MPI_BYTE, peer, 2, comm, &requests[m]);
    }
  } else if (me == peer) {
    for (int m = 0; m < kBandwidthMessages; ++m)
      MPI_Irecv(buffers[m].data(), kBandwidthBytes, MPI_BYTE, 0, 2, comm, &requests[m]);
  }
  MPI_Waitall(kBandwidthMessages, requests.data(), MPI_STATUSES_IGNORE);
  if (me == peer) {
    char done = 1;
    MPI_Send(&done, 1, MPI_CHAR, 0, 3, comm);
    for (int m = 0; m < kBandwidthMessages; ++m)
      for (size_t i = 0; i < buffers[m].size(); ++i) ok = ok && buffers[m][i] == pattern(0, m, i);
  } else if (me == 0) {
    char done = 0;
    MPI_Recv(&done, 1, MPI_CHAR, peer, 3, comm, MPI_STATUS_IGNORE);
  }
  const double seconds = MPI_Wtime() - start;
  mb_per_s = double(kBandwidthBytes) * kBandwidthMessages / seconds / 1e6;
  return ok;
}

// Each rank contributes rank + i at index i: the sum is n(n-1)/2 + n*i.
bool allreduce(MPI_Comm comm, size_t count) {
  const int me = rank_of(comm), n = size_of(comm);
  std::vector<int64_t> in(count), out(count, -1);
  for (size_t i = 0; i < count; ++i) in[i] = me + static_cast<int64_t>(i);
  MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_INT64_T, MPI_SUM, comm);
  bool ok = true;
  for (size_t i = 0; i < count; ++i)
    ok = ok && out[i] == int64_t{n} * (n - 1) / 2 + int64_t{n} * static_cast<int64_t>(i);
  return ok;
}

// Every rank puts its block into its right neighbour's window and gets its left neighbour's
// block back out of its own window's neighbour.
bool one_sided(MPI_Comm comm) {
  const int me = rank_of(comm), n = size_of(comm);
  constexpr int kWords = 4096;
  std::vector<int64_t> window(kWords, -1), mine(kWords), got(kWords, -2);
  for (int i = 0; i < kWords; ++i) mine[i] = int64_t{me} * 1000000 + i;
  MPI_Win win;
  MPI_Win_create(window.data(), kWords * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, comm,
                 &win);
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  MPI_Win_fence(0, win);
  MPI_Put(mine.data(), kWords, MPI_INT64_T, right, 0, kWords, MPI_INT64_T, win);
  MPI_Win_fence(0, win);
  bool ok = true;
  for (int i = 0; i < kWords; ++i) ok = ok && window[i] == int64_t{left} * 1000000 + i;
  // Our block now sits in the right neighbour's window: read it back from there.
  MPI_Get(got.data(), kWords, MPI_INT64_T, right, 0, kWords, MPI_INT64_T, win);
  MPI_Win_fence(0, win);
  for (int i = 0; i < kWords; ++i) ok = ok && got[i] == mine[i];
  MPI_Win_free(&win);
  return ok;
}

// A check passes only if it passed on every rank.
bool everywhere(MPI_Comm comm, bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm);
  return all == 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const MPI_Comm comm = MPI_COMM_WORLD;
  const bool root = rank_of(comm) == 0;
  bool all_ok = true;
  const auto report = [&](const char* name, bool ok, const char* detail) {
    all_ok = all_ok && ok;
    if (root) std::printf("%-28s %s %s\n", name, ok ? "ok" : "FAILED", detail);
  };
  char detail[96];

  double usec = 0;
  bool ok = everywhere(comm, ping_pong(comm, usec));
  std::snprintf(detail, sizeof detail, "(8 B round trip / 2: %.2f us)", usec);
  report("ping-pong latency", ok, detail);

  double mbps = 0;
  ok = everywhere(comm, bandwidth(comm, mbps));
  std::snprintf(detail, sizeof detail, "(%d x 1 MiB: %.0f MB/s)", kBandwidthMessages, mbps);
  report("bandwidth, data verified", ok, detail);

  report("MPI_Allreduce 16 x int64", everywhere(comm, allreduce(comm, 16)), "");
  report("MPI_Allreduce 1 Mi x int64", everywhere(comm, allreduce(comm, 1 << 20)), "");
  report("MPI_Put / MPI_Get", everywhere(comm, one_sided(comm)), "");

  if (root)
    std::printf("%s on %d ranks\n", all_ok ? "all checks passed" : "CHECKS FAILED", size_of(comm));
  MPI_Finalize();
  return all_ok ? 0 : 1;
}

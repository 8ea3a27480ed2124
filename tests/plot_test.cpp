// tools/rdmakit-plot: charts from the tools' JSON lines (perf's and rpc-bench's shapes),
// several runs on one chart, and a one-line error (exit 2, no traceback) for bad input.
// Skipped where Debian's python3-matplotlib is not installed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/subprocess.hpp"

namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

nlohmann::json perf_bw(int size, double mib) {  // as `rdmakit perf write_bw --json`
  return {{"bw_avg_mib", mib}, {"bw_peak_mib", mib}, {"msg_rate_mpps", mib / size},
          {"size", size},      {"test", "write_bw"}, {"iterations", 200}};
}
nlohmann::json perf_lat(int size, double typical) {  // as `rdmakit perf write_lat --json`
  return {{"size", size}, {"t_typical", typical}, {"t_99", 2 * typical}, {"test", "write_lat"}};
}
nlohmann::json rpc_bench(int size, double median) {  // as `rdmakit rpc-bench --json`
  return {{"request_bytes", size},
          {"calls_per_second", 1e6 / median},
          {"latency_us", {{"median", median}, {"p99", 2 * median}}}};
}

class Plot : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!rdmakit::testing::run({"/usr/bin/python3", "-c", "import matplotlib"}, 60s).ok())
      GTEST_SKIP() << "matplotlib is missing (apt-get install python3-matplotlib)";
    dir_ = fs::temp_directory_path() / ("rdmakit-plot-" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// A JSON-lines file among other output, as the tools write it.
  std::string write(const std::string& name, const std::vector<nlohmann::json>& objects) {
    const fs::path path = dir_ / name;
    std::ofstream f(path);
    f << " #bytes  a table line the tool also printed\n";
    for (const nlohmann::json& o : objects) f << o.dump() << "\n";
    return path.string();
  }
  std::string out(const std::string& name) const { return (dir_ / name).string(); }
  rdmakit::testing::Exit plot(const std::string& args) {
    return rdmakit::testing::run(rdmakit::testing::with_args({RDMAKIT_PLOT}, args), 60s);
  }
  static std::string read(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
  }

  fs::path dir_;
};

TEST_F(Plot, TwoRunsOnOnePngChart) {
  const std::string a = write("a.json", {perf_bw(8, 80), perf_bw(64, 640), perf_bw(4096, 9000)});
  const std::string b = write("b.json", {perf_bw(8, 40), perf_bw(64, 320), perf_bw(4096, 5000)});
  const rdmakit::testing::Exit done = plot(a + ":softrdma " + b + ":UCX -o " + out("bw.png"));
  ASSERT_TRUE(done.ok()) << done.describe();
  EXPECT_EQ(read(out("bw.png")).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

TEST_F(Plot, SvgLatencyNamesEverySeriesAndPercentile) {
  const std::string a = write("a.json", {perf_lat(2, 0.2), perf_lat(64, 0.3), perf_lat(65536, 9)});
  const std::string b = write("b.json", {rpc_bench(32, 1.0), rpc_bench(1024, 1.5)});
  const rdmakit::testing::Exit done =
      plot(a + ":host " + b + ":rpc -o " + out("lat.svg") + " --metric latency");
  ASSERT_TRUE(done.ok()) << done.describe();
  const std::string svg = read(out("lat.svg"));
  EXPECT_THAT(svg, HasSubstr("<svg"));
  for (const char* label : {"host typical", "host p99", "rpc median", "rpc p99"})
    EXPECT_THAT(svg, HasSubstr(label));
}

// The bench/ scripts compare fixed workloads: one group of bars per workload.
TEST_F(Plot, BarsPerWorkload) {
  const std::string rc = write("rc.json", {{{"workload", "one host"}, {"calls_per_second", 5e6}},
                                           {{"workload", "two hosts"}, {"calls_per_second", 2e5}}});
  const std::string ucx =
      write("ucx.json", {{{"workload", "one host"}, {"calls_per_second", 1e7}}});
  const rdmakit::testing::Exit done =
      plot(rc + ":rc " + ucx + ":UCX --bars --metric rate -o " + out("bars.svg"));
  ASSERT_TRUE(done.ok()) << done.describe();
  const std::string svg = read(out("bars.svg"));
  for (const char* text : {"one host", "two hosts", "rc", "UCX"}) EXPECT_THAT(svg, HasSubstr(text));
  const std::string sized = write("sized.json", {perf_bw(8, 1)});  // no workload field
  EXPECT_EQ(plot(sized + " --bars -o " + out("x.png")).code, 2);
}

TEST_F(Plot, BadInputGetsOneLineAndExitCodeTwo) {
  std::ofstream(out("broken.json")) << "{\"size\": 8,\n";
  const std::string no_figures = write("none.json", {{{"size", 8}}});
  const std::string fine = write("fine.json", {perf_bw(8, 1)});
  const std::vector<std::pair<std::string, std::string>> cases{
      {out("missing.json") + " -o " + out("x.png"), "No such file"},
      {out("broken.json") + " -o " + out("x.png"), "not JSON"},
      {no_figures + " -o " + out("x.png"), "no figures"},
      {fine + " -o " + out("x.jpg"), ".png or .svg"}};
  for (const auto& [args, says] : cases) {
    const rdmakit::testing::Exit done = plot(args);
    EXPECT_EQ(done.code, 2) << args << "\n" << done.output;
    EXPECT_THAT(done.output, HasSubstr(says));
    EXPECT_THAT(done.output, Not(HasSubstr("Traceback")));
  }
}

}  // namespace

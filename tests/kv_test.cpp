// `rdmakit kv` (tools/rdmakit/kv_*): its table, wire format, values and checks as units; a
// server in this process answering malformed requests with error statuses; and the tool run
// end to end on inproc://, shm://, tcp://, rc:// and ud:// (the last three also across two
// network namespaces), with RPC and one-sided GETs, uniform and Zipf keys, checking exit code
// and JSON.
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <array>
#include <atomic>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kv_check.hpp"
#include "kv_protocol.hpp"
#include "kv_server.hpp"
#include "kv_table.hpp"
#include "kv_values.hpp"
#include "kv_workload.hpp"
#include "rdmakit/rpc/client.hpp"
#include "support/json_lines.hpp"
#include "support/listening.hpp"
#include "support/subprocess.hpp"
#include "support/two_hosts.hpp"

namespace {

using namespace std::chrono_literals;
using namespace rdmakit::tool::kv;
using rdmakit::rpc::Code;

std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> out(s.size());
  for (size_t i = 0; i < s.size(); ++i) out[i] = static_cast<std::byte>(s[i]);
  return out;
}

std::string text_of(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// ---------------------------------------------------------------------------- the table

class TableTest : public ::testing::Test {
 protected:
  void make(uint64_t slots, uint32_t capacity) {
    layout_ = TableLayout::with_slots(slots, capacity);
    memory_.assign(layout_.bytes() / 8, 0);
    table_.emplace(std::as_writable_bytes(std::span(memory_)), layout_);
  }
  std::span<const std::byte> slot_copy(uint64_t index) const {
    return std::as_bytes(std::span(memory_))
        .subspan(index * layout_.slot_bytes, layout_.slot_bytes);
  }
  TableLayout layout_;
  std::vector<uint64_t> memory_;  // 8-byte aligned
  std::optional<KvTable> table_;
};

TEST_F(TableTest, PutGetOverwriteDelete) {
  make(64, 32);
  EXPECT_FALSE(table_->get(7));
  EXPECT_EQ(table_->put(7, bytes_of("seven")), KvTable::PutResult::inserted);
  EXPECT_EQ(table_->put(8, bytes_of("eight")), KvTable::PutResult::inserted);
  ASSERT_TRUE(table_->get(7));
  EXPECT_EQ(text_of(*table_->get(7)), "seven");
  EXPECT_EQ(table_->put(7, bytes_of("SEVEN, longer")), KvTable::PutResult::updated);
  EXPECT_EQ(text_of(*table_->get(7)), "SEVEN, longer");
  EXPECT_EQ(table_->size(), 2u);
  EXPECT_TRUE(table_->erase(7));
  EXPECT_FALSE(table_->get(7));
  EXPECT_FALSE(table_->erase(7));
  EXPECT_EQ(text_of(*table_->get(8)), "eight");
  EXPECT_EQ(table_->size(), 1u);
  EXPECT_EQ(table_->put(7, bytes_of("again")), KvTable::PutResult::inserted);
  EXPECT_EQ(text_of(*table_->get(7)), "again");
}

TEST_F(TableTest, RefusesValuesLargerThanASlot) {
  make(8, 16);
  EXPECT_EQ(table_->put(1, std::vector<std::byte>(17)), KvTable::PutResult::too_large);
  EXPECT_EQ(table_->put(1, std::vector<std::byte>(16)), KvTable::PutResult::inserted);
}

TEST_F(TableTest, FullTableRefusesNewKeysButUpdatesAndReusesTombstones) {
  make(8, 16);
  ASSERT_EQ(layout_.slots, 8u);
  for (uint64_t k = 0; k < 8; ++k)
    ASSERT_EQ(table_->put(k, bytes_of("v" + std::to_string(k))), KvTable::PutResult::inserted);
  EXPECT_EQ(table_->put(100, bytes_of("x")), KvTable::PutResult::full);
  EXPECT_EQ(table_->put(3, bytes_of("new3")), KvTable::PutResult::updated);
  for (uint64_t k = 0; k < 8; ++k) ASSERT_TRUE(table_->get(k)) << k;
  EXPECT_FALSE(table_->get(100));  // probes every slot, finds nothing, stops
  EXPECT_TRUE(table_->erase(5));
  EXPECT_EQ(table_->put(100, bytes_of("x")), KvTable::PutResult::inserted);  // the tombstone
  EXPECT_EQ(text_of(*table_->get(100)), "x");
  EXPECT_EQ(text_of(*table_->get(3)), "new3");
  EXPECT_FALSE(table_->get(5));
}

TEST_F(TableTest, KeysBehindATombstoneAreStillFound) {
  make(1024, 8);
  // Many keys: some share home slots and sit behind others; delete every third.
  for (uint64_t k = 0; k < 600; ++k)
    ASSERT_NE(table_->put(k, bytes_of("12345678")), KvTable::PutResult::full);
  for (uint64_t k = 0; k < 600; k += 3) ASSERT_TRUE(table_->erase(k));
  for (uint64_t k = 0; k < 600; ++k) EXPECT_EQ(table_->get(k).has_value(), k % 3 != 0) << k;
}

TEST_F(TableTest, ReadersSeeWholeSlotsAndDetectTornCopies) {
  make(16, 16);
  ASSERT_EQ(table_->put(42, bytes_of("answer")), KvTable::PutResult::inserted);
  const uint64_t home = home_slot(42, layout_.slots);
  std::vector<std::byte> copy(slot_copy(home).begin(), slot_copy(home).end());
  SlotView view = inspect_slot(copy, layout_);
  ASSERT_EQ(view.kind, SlotView::Kind::used);
  EXPECT_EQ(view.key, 42u);
  EXPECT_EQ(text_of(view.value), "answer");
  EXPECT_EQ(view.version % 2, 0u);
  // A copy that overlapped a write: its tail is newer than its head, or odd.
  store_le(copy.data() + layout_.tail_offset(), view.version + 1, 8);
  EXPECT_EQ(inspect_slot(copy, layout_).kind, SlotView::Kind::torn);
  store_le(copy.data() + layout_.tail_offset(), view.version + 2, 8);
  EXPECT_EQ(inspect_slot(copy, layout_).kind, SlotView::Kind::torn);
  store_le(copy.data(), view.version + 1, 8);
  store_le(copy.data() + layout_.tail_offset(), view.version + 1, 8);
  EXPECT_EQ(inspect_slot(copy, layout_).kind, SlotView::Kind::torn);
  // A whole copy with a length beyond the slot is not a slot the server wrote.
  store_le(copy.data(), view.version, 8);
  store_le(copy.data() + layout_.tail_offset(), view.version, 8);
  store_le(copy.data() + 20, 17, 4);
  EXPECT_EQ(inspect_slot(copy, layout_).kind, SlotView::Kind::corrupt);
  // Deleting leaves a tombstone, at a newer version.
  ASSERT_TRUE(table_->erase(42));
  const SlotView erased = inspect_slot(slot_copy(home), layout_);
  EXPECT_EQ(erased.kind, SlotView::Kind::erased);
  EXPECT_GT(erased.version, view.version);
  EXPECT_EQ(inspect_slot(slot_copy((home + 1) % layout_.slots), layout_).kind,
            SlotView::Kind::empty);
}

// ----------------------------------------------------------------------- the wire format

struct Malformed {
  std::string name;
  uint32_t method;
  std::vector<std::byte> frame;
  Code expected;
};

std::vector<std::byte> frame(std::initializer_list<std::pair<uint64_t, size_t>> fields,
                             size_t extra = 0) {
  std::vector<std::byte> out;
  for (auto [value, size] : fields) {
    const size_t at = out.size();
    out.resize(at + size);
    store_le(out.data() + at, value, size);
  }
  out.resize(out.size() + extra, std::byte{0x61});
  return out;
}

constexpr Limits kLimits{1000, 64};

std::vector<Malformed> malformed_requests() {
  return {
      {"get_empty", kGet, {}, Code::invalid_argument},
      {"get_short", kGet, frame({{5, 4}}), Code::invalid_argument},
      {"get_long", kGet, frame({{5, 8}}, 1), Code::invalid_argument},
      {"get_key_out_of_range", kGet, frame({{1000, 8}}), Code::out_of_range},
      {"get_huge_key", kGet, frame({{~uint64_t{0}, 8}}), Code::out_of_range},
      {"delete_short", kDelete, frame({{5, 7}}), Code::invalid_argument},
      {"delete_key_out_of_range", kDelete, frame({{5000, 8}}), Code::out_of_range},
      {"put_empty", kPut, {}, Code::invalid_argument},
      {"put_short_header", kPut, frame({{5, 8}, {0, 3}}), Code::invalid_argument},
      {"put_length_beyond_frame", kPut, frame({{5, 8}, {10, 4}}, 9), Code::invalid_argument},
      {"put_length_short_of_frame", kPut, frame({{5, 8}, {10, 4}}, 11), Code::invalid_argument},
      {"put_huge_length", kPut, frame({{5, 8}, {0xffffffff, 4}}, 4), Code::invalid_argument},
      {"put_empty_value", kPut, frame({{5, 8}, {0, 4}}), Code::invalid_argument},
      {"put_oversized_value", kPut, frame({{5, 8}, {65, 4}}, 65), Code::invalid_argument},
      {"put_key_out_of_range", kPut, frame({{1000, 8}, {8, 4}}, 8), Code::out_of_range},
      {"describe_short", kDescribe, frame({{10, 4}}), Code::invalid_argument},
      {"describe_too_many_writers", kDescribe, frame({{10, 4}, {1u << 20, 4}}),
       Code::invalid_argument},
      {"unknown_method_0", 0, frame({{5, 8}}), Code::invalid_argument},
      {"unknown_method_99", 99, frame({{5, 8}}), Code::invalid_argument},
  };
}

void PrintTo(const Malformed& m, std::ostream* os) {
  *os << m.name;
}

class MalformedRequest : public ::testing::TestWithParam<Malformed> {};

TEST_P(MalformedRequest, IsRefusedWithAStatus) {
  const Malformed& m = GetParam();
  const Decoded d = decode_request(m.method, m.frame, kLimits);
  EXPECT_FALSE(d.ok());
  EXPECT_EQ(d.code, m.expected) << d.error;
  EXPECT_FALSE(d.error.empty());
}

std::string malformed_name(const ::testing::TestParamInfo<Malformed>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Decode, MalformedRequest, ::testing::ValuesIn(malformed_requests()),
                         malformed_name);

TEST(Protocol, DecodesWhatTheClientEncodes) {
  Decoded d = decode_request(kGet, encode_key(999), kLimits);
  ASSERT_TRUE(d.ok()) << d.error;
  EXPECT_EQ(d.request.op, Op::get);
  EXPECT_EQ(d.request.key, 999u);
  d = decode_request(kDelete, encode_key(3), kLimits);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.request.op, Op::erase);
  const std::vector<std::byte> value = bytes_of(std::string(64, 'v'));
  std::vector<std::byte> put(put_bytes(value.size()));
  encode_put(put, 17, value);
  d = decode_request(kPut, put, kLimits);
  ASSERT_TRUE(d.ok()) << d.error;
  EXPECT_EQ(d.request.key, 17u);
  EXPECT_EQ(text_of(d.request.value), std::string(64, 'v'));
  d = decode_request(kDescribe, encode_describe(70, 3), kLimits);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.request.grant_seconds, 70u);
  EXPECT_EQ(d.request.writers, 3u);

  TableInfo info;
  info.keys = 123;
  info.value_capacity = 4096;
  info.slot_bytes = 4160;
  info.slots = 256;
  info.first_writer = 9;
  info.rdma_port = 7777;
  info.table = rdmakit::RemoteBuffer(0x1234567890, 256 * 4160, 0xabcdef, 1700000000000);
  const std::optional<TableInfo> back = decode_table_info(encode_table_info(info));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->keys, 123u);
  EXPECT_EQ(back->slot_bytes, 4160u);
  EXPECT_EQ(back->first_writer, 9u);
  EXPECT_EQ(back->rdma_port, 7777);
  EXPECT_EQ(back->table.address(), 0x1234567890u);
  EXPECT_EQ(back->table.rkey(), 0xabcdefu);
  EXPECT_FALSE(decode_table_info(std::vector<std::byte>(kTableInfoBytes - 1)));
}

// ------------------------------------------------------------------- values and checks

class ValueSize : public ::testing::TestWithParam<size_t> {};

TEST_P(ValueSize, NamesItsStampAndRejectsAnyOtherBytes) {
  const size_t size = GetParam();
  std::vector<std::byte> value(size);
  const uint64_t stamp = make_stamp(3, 12345);
  fill_value(77, stamp, value);
  EXPECT_EQ(value_stamp(77, value), stamp);
  for (size_t at : {size_t{0}, size / 2, size - 1}) {
    std::vector<std::byte> flipped = value;
    flipped[at] ^= std::byte{0x10};
    const std::optional<uint64_t> s = value_stamp(77, flipped);
    EXPECT_TRUE(!s || *s != stamp) << "byte " << at;  // 8-byte values: another stamp
  }
  if (size > 8) {
    EXPECT_FALSE(value_stamp(78, value)) << "another key's value";
  }
}

INSTANTIATE_TEST_SUITE_P(Values, ValueSize, ::testing::Values(8, 9, 15, 16, 17, 64, 1000, 4096),
                         [](const ::testing::TestParamInfo<size_t>& param) {
                           return "bytes_" + std::to_string(param.param);
                         });

std::vector<std::byte> value_for(uint64_t key, uint64_t stamp, size_t size = 32) {
  std::vector<std::byte> v(size);
  fill_value(key, stamp, v);
  return v;
}

TEST(History, AcceptsOnlyValuesTheKeyMayHave) {
  Writers writers(5, 1, 10);
  History h(writers, 0, 10, 32);
  ASSERT_EQ(h.writer(), 5u);
  const uint64_t s1 = h.begin_write(4, false);
  h.acknowledge(4, s1, false);
  const History::Ticket after_s1 = h.begin_get(4);
  EXPECT_EQ(h.check(4, after_s1, value_for(4, s1)), nullptr);
  EXPECT_NE(h.check(4, after_s1, std::nullopt), nullptr) << "never deleted";
  EXPECT_NE(h.check(4, after_s1, value_for(4, s1, 31)), nullptr) << "wrong size";
  EXPECT_NE(h.check(4, after_s1, value_for(3, s1)), nullptr) << "another key's value";
  EXPECT_NE(h.check(4, after_s1, value_for(4, make_stamp(5, 99))), nullptr) << "never issued";
  EXPECT_NE(h.check(4, after_s1, value_for(4, make_stamp(6, 1))), nullptr) << "another writer";

  const uint64_t s2 = h.begin_write(4, false);  // in flight: old or new value
  const History::Ticket during_s2 = h.begin_get(4);
  EXPECT_EQ(h.check(4, during_s2, value_for(4, s1)), nullptr);
  EXPECT_EQ(h.check(4, during_s2, value_for(4, s2)), nullptr);
  h.acknowledge(4, s2, false);
  const History::Ticket after_s2 = h.begin_get(4);
  EXPECT_NE(h.check(4, after_s2, value_for(4, s1)), nullptr) << "stale";
  EXPECT_EQ(h.check(4, after_s2, value_for(4, s2)), nullptr);

  const uint64_t d = h.begin_write(4, true);
  const History::Ticket during_delete = h.begin_get(4);
  EXPECT_EQ(h.check(4, during_delete, std::nullopt), nullptr);
  EXPECT_EQ(h.check(4, during_delete, value_for(4, s2)), nullptr);
  h.acknowledge(4, d, true);
  const History::Ticket after_delete = h.begin_get(4);
  EXPECT_EQ(h.check(4, after_delete, std::nullopt), nullptr);
  EXPECT_NE(h.check(4, after_delete, value_for(4, s2)), nullptr) << "deleted since";
}

TEST(History, WithSeveralWritersAcceptsTheirsOnlyIfIssued) {
  Writers writers(10, 2, 10);
  History a(writers, 0, 10, 16), b(writers, 1, 10, 16);
  const uint64_t sb = b.begin_write(2, false);
  b.acknowledge(2, sb, false);
  EXPECT_EQ(a.check(2, a.begin_get(2), value_for(2, sb, 16)), nullptr);
  EXPECT_NE(a.check(2, a.begin_get(2), value_for(2, make_stamp(11, 2), 16)), nullptr);
  EXPECT_NE(a.check(2, a.begin_get(2), value_for(2, make_stamp(12, 1), 16)), nullptr);
  EXPECT_NE(a.check(2, a.begin_get(2), std::nullopt), nullptr);
  b.begin_write(2, true);
  EXPECT_EQ(a.check(2, a.begin_get(2), std::nullopt), nullptr);
}

TEST(Workload, ZipfFavoursLowKeysAndStaysInRange) {
  const uint64_t n = 1000;
  KeyChooser zipf(n, Distribution::zipf, 0.99), uniform(n, Distribution::uniform, 0.99);
  std::mt19937_64 rng(1);
  std::vector<uint64_t> z(n), u(n);
  for (int i = 0; i < 200000; ++i) {
    const uint64_t kz = zipf.next(rng), ku = uniform.next(rng);
    ASSERT_LT(kz, n);
    ASSERT_LT(ku, n);
    ++z[kz];
    ++u[ku];
  }
  // theta 0.99 over 1000 keys: key 0 draws about 1/zeta(1000) ~ 13 %, key 1 about half that.
  EXPECT_GT(z[0], 200000 * 0.10);
  EXPECT_LT(z[0], 200000 * 0.17);
  EXPECT_GT(static_cast<double>(z[1]), static_cast<double>(z[0]) * 0.4);
  EXPECT_LT(static_cast<double>(z[1]), static_cast<double>(z[0]) * 0.6);
  EXPECT_GT(z[0], 50 * z[999]);
  for (uint64_t k = 0; k < n; ++k) EXPECT_LT(u[k], 200000 / n * 2) << k;
  Workload w(uniform, 50, 10, 7);
  std::map<OpKind, int> kinds;
  for (int i = 0; i < 10000; ++i) ++kinds[w.next().kind];
  EXPECT_NEAR(kinds[OpKind::get], 5000, 300);
  EXPECT_NEAR(kinds[OpKind::erase], 500, 120);
}

// --------------------------------------------------- a server in this process, raw calls

TEST(KvServer, AnswersMalformedRequestsWithErrorsAndKeepsServing) {
  ServerConfig config;
  config.url = "inproc://kv-test-" + std::to_string(getpid());
  config.keys = 100;
  config.value_capacity = 64;
  Server server(config);
  std::atomic<bool> stop{false};
  std::thread serving([&] { server.serve(stop); });
  struct Stop {
    std::atomic<bool>& stop;
    std::thread& thread;
    ~Stop() {
      stop = true;
      thread.join();
    }
  } stopper{stop, serving};

  rdmakit::rpc::Client client = rdmakit::rpc::Client::connect(server.url());
  auto call = [&](uint32_t method, std::span<const std::byte> request) {
    rdmakit::rpc::CallOptions o;
    o.method = method;
    o.max_response = 256;
    o.timeout = 10s;
    std::optional<std::pair<Code, std::string>> got;
    EXPECT_TRUE(client.call(request, 1, o).ok());
    const auto give_up = std::chrono::steady_clock::now() + 20s;
    while (!got && std::chrono::steady_clock::now() < give_up) {
      client.poll([&](const rdmakit::rpc::Response& r) {
        got.emplace(r.status.code, r.status.ok() ? text_of(r.data) : std::string());
      });
    }
    EXPECT_TRUE(got) << "no answer";
    return got.value_or(std::pair{Code::unknown, std::string()});
  };
  for (const Malformed& m : malformed_requests())
    EXPECT_EQ(call(m.method, m.frame).first, m.expected) << m.name;

  std::vector<std::byte> put(put_bytes(5));
  encode_put(put, 99, bytes_of("hello"));
  EXPECT_EQ(call(kPut, put).first, Code::ok);
  const auto got = call(kGet, encode_key(99));
  EXPECT_EQ(got.first, Code::ok);
  EXPECT_EQ(got.second, "hello");
  EXPECT_EQ(call(kGet, encode_key(98)).first, Code::not_found);
  EXPECT_EQ(call(kDelete, encode_key(99)).second, std::string(1, '\1'));
  EXPECT_EQ(call(kDelete, encode_key(99)).second, std::string(1, '\0'));
  EXPECT_EQ(call(kGet, encode_key(99)).first, Code::not_found);
  const auto described = call(kDescribe, encode_describe(0, 2));
  ASSERT_EQ(described.first, Code::ok);
  const std::optional<TableInfo> info = decode_table_info(bytes_of(described.second));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->keys, 100u);
  EXPECT_EQ(info->value_capacity, 64u);
  EXPECT_TRUE(info->table.empty()) << "no grant asked for";
  EXPECT_EQ(call(kDescribe, encode_describe(0, 1)).first, Code::ok);
  EXPECT_TRUE(client.connected());
}

// -------------------------------------------------------------------- the tool, end to end

using rdmakit::testing::last_json;

std::vector<std::string> tool(const std::string& args, std::vector<std::string> prefix = {}) {
  prefix.push_back(SOFTRDMA_RUN);
  prefix.push_back(RDMAKIT_TOOL);
  prefix.push_back("kv");
  return rdmakit::testing::with_args(std::move(prefix), args);
}

// Runs a client with `args` against `url`, checks its exit code and JSON, returns the JSON.
nlohmann::json run_client(const std::string& url, const std::string& args,
                          std::vector<std::string> prefix = {}) {
  const rdmakit::testing::Exit done =
      rdmakit::testing::run(tool(url + " --json -D 0.3 " + args, std::move(prefix)), 90s);
  EXPECT_TRUE(done.ok()) << done.describe();
  nlohmann::json j = last_json(done.output);
  EXPECT_TRUE(j.is_object()) << done.output;
  if (!j.is_object()) return j;
  EXPECT_GT(j["ops"].get<uint64_t>(), 0u) << done.output;
  EXPECT_EQ(j["errors"].get<uint64_t>(), 0u) << done.output;
  EXPECT_EQ(j["wrong_values"].get<uint64_t>(), 0u) << done.output;
  EXPECT_GT(j["checked"].get<uint64_t>(), 0u) << "every GET's answer is checked";
  EXPECT_EQ(j["checked"], j["gets"]);
  EXPECT_GT(j["ops_per_second"].get<double>(), 0.0);
  EXPECT_GT(j["latency_us"]["median"].get<double>(), 0.0);
  if (j["one_sided"].get<bool>()) {
    EXPECT_GE(j["slot_reads"].get<uint64_t>(), j["gets"].get<uint64_t>());
  }
  return j;
}

// tcp, rc and ud: a server process on a free port (rc and ud on softrdma's device).
enum class Where { inproc, shm_process, tcp_process, rc_process, ud_process, tcp_local };

const char* scheme_of(Where where) {
  switch (where) {
    case Where::rc_process:
      return "rc";
    case Where::ud_process:
      return "ud";
    default:
      return "tcp";
  }
}

struct ToolCase {
  std::string name;
  Where where;
  std::string server_args;  // the table
  std::string client_args;
};

void PrintTo(const ToolCase& c, std::ostream* os) {
  *os << c.name;
}

class KvTool : public ::testing::TestWithParam<ToolCase> {};

TEST_P(KvTool, RunsAndReadsOnlyRightValues) {
  const ToolCase& c = GetParam();
  const std::string tag = std::to_string(getpid());
  std::optional<rdmakit::testing::Process> server;
  std::string url;
  std::string local;
  switch (c.where) {
    case Where::inproc:
      url = "inproc://kv-" + c.name;
      break;
    case Where::tcp_local:
      url = "tcp://127.0.0.1:0";
      local = " --local";
      break;
    case Where::shm_process:
      url = "shm://kv-test-" + tag + "-" + c.name;
      server.emplace(tool(url + " --serve -D 80 " + c.server_args));
      break;
    case Where::tcp_process:
    case Where::rc_process:
    case Where::ud_process: {
      const int port = rdmakit::testing::free_tcp_port();
      url = std::string(scheme_of(c.where)) + "://127.0.0.1:" + std::to_string(port);
      server.emplace(tool(url + " --serve -D 80 " + c.server_args));
      ASSERT_TRUE(rdmakit::testing::wait_listening(port, 20s));
      break;
    }
  }
  const nlohmann::json j = run_client(url, c.server_args + " " + c.client_args + local);
  if (!j.is_object()) return;
  EXPECT_EQ(j["preloaded"], j["keys"]) << "every key PUT before the workload";
  EXPECT_EQ(j["url"].get<std::string>().substr(0, 6), url.substr(0, 6));
  const bool one_sided = c.client_args.find("--one-sided") != std::string::npos;
  EXPECT_EQ(j["one_sided"].get<bool>(), one_sided);
  const bool zipf = c.client_args.find("zipf") != std::string::npos;
  EXPECT_EQ(j["distribution"], zipf ? "zipf" : "uniform");
  if (j["read_ratio"].get<uint32_t>() < 100) {
    EXPECT_GT(j["puts"].get<uint64_t>(), 0u);
  }
  if (j["read_ratio"].get<uint32_t>() == 100) {
    EXPECT_EQ(j["puts"].get<uint64_t>(), 0u);
  }
}

std::string tool_case_name(const ::testing::TestParamInfo<ToolCase>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(
    Transports, KvTool,
    ::testing::Values(ToolCase{"inproc_uniform", Where::inproc, "--keys 5000", "-r 95"},
                      ToolCase{"inproc_zipf_writes", Where::inproc, "--keys 5000",
                               "--distribution zipf -r 50 -q 8"},
                      ToolCase{"inproc_one_sided_zipf", Where::inproc, "--keys 5000",
                               "--one-sided --distribution zipf -r 50 -q 8"},
                      ToolCase{"shm_uniform_two_clients", Where::shm_process, "--keys 5000",
                               "-c 2 -q 4 -r 95"},
                      ToolCase{"shm_one_sided_zipf_4KiB", Where::shm_process, "--keys 2000 -s 4096",
                               "--one-sided --distribution zipf -r 50 -q 4"},
                      ToolCase{"shm_one_sided_8B_two_clients", Where::shm_process,
                               "--keys 5000 -s 8", "--one-sided -c 2 -q 8 -r 50"},
                      ToolCase{"tcp_zipf_reads_only", Where::tcp_process, "--keys 5000",
                               "--distribution zipf -r 100 -q 4"},
                      ToolCase{"tcp_one_sided_uniform", Where::tcp_process, "--keys 5000 -s 256",
                               "--one-sided -r 95 -q 4"},
                      ToolCase{"tcp_local_one_sided_zipf", Where::tcp_local, "--keys 5000",
                               "--one-sided --distribution zipf -r 50 -q 4"},
                      ToolCase{"rc_zipf_two_clients", Where::rc_process, "--keys 5000",
                               "--distribution zipf -c 2 -q 8 -r 50"},
                      ToolCase{"rc_one_sided_4KiB", Where::rc_process, "--keys 2000 -s 4096",
                               "--one-sided -r 95 -q 4"},
                      ToolCase{"ud_uniform_4KiB_writes", Where::ud_process, "--keys 2000 -s 4096",
                               "-c 2 -q 8 -r 50"},
                      ToolCase{"ud_one_sided_zipf", Where::ud_process, "--keys 5000",
                               "--one-sided --distribution zipf -r 95 -q 4"}),
    tool_case_name);

class KvToolTwoHosts : public ::testing::TestWithParam<std::string> {};

TEST_P(KvToolTwoHosts, RpcAndOneSidedAcrossNamespaces) {
  rdmakit::testing::TwoHosts hosts;
  if (!hosts.ok()) GTEST_SKIP() << "no network namespaces here: " << hosts.reason();
  const int port = rdmakit::testing::free_tcp_port();
  const std::string url = GetParam() + "://" + hosts.address(0) + ":" + std::to_string(port);
  rdmakit::testing::Process server(tool(url + " --serve -D 80 --keys 3000", hosts.on(0)));
  ASSERT_TRUE(rdmakit::testing::wait_listening(port, 20s, server.pid()));
  run_client(url, "--keys 3000 -q 4 -r 50 --distribution zipf", hosts.on(1));
  const nlohmann::json j = run_client(url, "--keys 3000 -q 4 -r 95 --one-sided", hosts.on(1));
  if (j.is_object()) {
    EXPECT_TRUE(j["one_sided"].get<bool>());
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, KvToolTwoHosts, ::testing::Values("tcp", "rc", "ud"),
                         [](const ::testing::TestParamInfo<std::string>& scheme) {
                           return scheme.param;
                         });

TEST(KvToolErrors, RefusesMoreKeysThanTheServerHolds) {
  const int port = rdmakit::testing::free_tcp_port();
  const std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  rdmakit::testing::Process server(tool(url + " --serve -D 60 --keys 100"));
  ASSERT_TRUE(rdmakit::testing::wait_listening(port, 20s));
  const rdmakit::testing::Exit done = rdmakit::testing::run(tool(url + " --keys 101 -D 0.2"), 30s);
  EXPECT_FALSE(done.ok());
  EXPECT_NE(done.output.find("--keys 100 or fewer"), std::string::npos) << done.output;
  const rdmakit::testing::Exit big =
      rdmakit::testing::run(tool(url + " --keys 100 -s 65 -D 0.2"), 30s);
  EXPECT_FALSE(big.ok());
  EXPECT_NE(big.output.find("values up to 64 B"), std::string::npos) << big.output;
}

TEST(KvToolErrors, ReportsAServerThatIsNotThere) {
  const rdmakit::testing::Exit done =
      rdmakit::testing::run(tool("shm://nobody-serves-kv-here -D 0.2"), 30s);
  EXPECT_FALSE(done.ok());
  EXPECT_NE(done.output.find("nothing listens"), std::string::npos) << done.output;
}

}  // namespace

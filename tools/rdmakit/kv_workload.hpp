// What `rdmakit kv` clients ask for: keys drawn uniformly or from a Zipf distribution (Gray
// et al.'s generator, as YCSB uses; key 0 is the hottest), and GET with probability
// read_ratio, else a write: a DELETE with probability delete_ratio, else a PUT.
#pragma once

#include <cstdint>
#include <random>

namespace rdmakit::tool::kv {

enum class Distribution { uniform, zipf };

// Keys 0 .. n-1 with P(k) proportional to 1 / (k+1)^theta (0 < theta < 1).
class ZipfKeys {
 public:
  ZipfKeys(uint64_t n, double theta);
  uint64_t next(std::mt19937_64& rng) const;

 private:
  uint64_t n_;
  double theta_, zeta_n_, alpha_, eta_, half_pow_theta_;
};

class KeyChooser {
 public:
  KeyChooser(uint64_t keys, Distribution distribution, double theta);
  uint64_t next(std::mt19937_64& rng) const;

 private:
  uint64_t keys_;
  Distribution distribution_;
  ZipfKeys zipf_;
};

enum class OpKind : uint8_t { get, put, erase };

struct KvOp {
  OpKind kind;
  uint64_t key;
};

class Workload {
 public:
  // Percentages 0 .. 100.
  Workload(const KeyChooser& keys, uint32_t read_percent, uint32_t delete_percent, uint64_t seed)
      : keys_(keys), read_(read_percent), delete_(delete_percent), rng_(seed) {}
  KvOp next();

 private:
  const KeyChooser& keys_;
  uint32_t read_, delete_;
  std::mt19937_64 rng_;
  std::uniform_int_distribution<uint32_t> percent_{0, 99};
};

}  // namespace rdmakit::tool::kv

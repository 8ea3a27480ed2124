#include "kv_workload.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace rdmakit::tool::kv {

ZipfKeys::ZipfKeys(uint64_t n, double theta) : n_(n), theta_(theta) {
  if (!(theta > 0 && theta < 1)) throw std::invalid_argument("Zipf theta must be in (0, 1)");
  zeta_n_ = 0;
  for (uint64_t i = 1; i <= n_; ++i) zeta_n_ += 1.0 / std::pow(static_cast<double>(i), theta_);
  const double zeta_2 = 1.0 + std::pow(0.5, theta_);
  alpha_ = 1.0 / (1.0 - theta_);
  half_pow_theta_ = std::pow(0.5, theta_);
  eta_ = n_ < 2 ? 0
                : (1.0 - std::pow(2.0 / static_cast<double>(n_), 1.0 - theta_)) /
                      (1.0 - zeta_2 / zeta_n_);
}

uint64_t ZipfKeys::next(std::mt19937_64& rng) const {
  if (n_ < 2) return 0;
  const double u = std::generate_canonical<double, 53>(rng);
  const double uz = u * zeta_n_;
  if (uz < 1.0) return 0;
  if (uz < 1.0 + half_pow_theta_) return 1;
  const double k = static_cast<double>(n_) * std::pow(eta_ * u - eta_ + 1.0, alpha_);
  return std::min<uint64_t>(static_cast<uint64_t>(k), n_ - 1);
}

KeyChooser::KeyChooser(uint64_t keys, Distribution distribution, double theta)
    : keys_(keys),
      distribution_(distribution),
      zipf_(distribution == Distribution::zipf ? keys : 1, theta) {}

uint64_t KeyChooser::next(std::mt19937_64& rng) const {
  if (distribution_ == Distribution::zipf) return zipf_.next(rng);
  return std::uniform_int_distribution<uint64_t>(0, keys_ - 1)(rng);
}

KvOp Workload::next() {
  const uint64_t key = keys_.next(rng_);
  if (percent_(rng_) < read_) return {OpKind::get, key};
  if (percent_(rng_) < delete_) return {OpKind::erase, key};
  return {OpKind::put, key};
}

}  // namespace rdmakit::tool::kv

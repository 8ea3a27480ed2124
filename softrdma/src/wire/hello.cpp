#include "wire/hello.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <unistd.h>
#include <cstring>

#include "engine/registry.hpp"

namespace softrdma::wire {

Hello hello_of(Role role, uint32_t own_ipv4_be, uint32_t peer_ipv4_be) {
  Hello h{};
  h.magic = kHelloMagic;
  h.version = kWireVersion;
  h.role = role;
  h.uid = static_cast<uint32_t>(geteuid());
  uint8_t message[1 + 2 * sizeof(uint32_t)];
  message[0] = static_cast<uint8_t>(role);
  std::memcpy(message + 1, &own_ipv4_be, sizeof own_ipv4_be);
  std::memcpy(message + 1 + sizeof own_ipv4_be, &peer_ipv4_be, sizeof peer_ipv4_be);
  const auto& secret = Registry::instance().host_secret();
  uint8_t mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), message, sizeof message, mac,
       &length);
  static_assert(sizeof(Identity) <= 32, "a truncated SHA-256");
  std::memcpy(h.identity.data(), mac, h.identity.size());
  return h;
}

const char* hello_problem(const Hello& h, Role role) {
  if (h.magic != kHelloMagic) return "it does not speak softrdma's wire format";
  if (h.version != kWireVersion) return "it speaks another version of softrdma's wire format";
  if (h.role != role) return "its hello is not that of the other end";
  return "";
}

}  // namespace softrdma::wire

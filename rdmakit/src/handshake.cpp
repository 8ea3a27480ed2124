#include "rdmakit/handshake.hpp"

#include <endian.h>

#include <algorithm>
#include <cstring>

namespace rdmakit {
namespace {

constexpr uint32_t kMagic = 0x4b4d4452;  // "RDMK"

class Writer {
 public:
  template <typename T>
  void put(T value) {
    const size_t at = out.size();
    out.resize(at + sizeof value);
    if constexpr (sizeof(T) == 2) value = static_cast<T>(htole16(value));
    if constexpr (sizeof(T) == 4) value = static_cast<T>(htole32(value));
    std::memcpy(out.data() + at, &value, sizeof value);
  }
  void put_bytes(std::span<const std::byte> bytes) {
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  std::vector<std::byte> out;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  template <typename T>
  bool get(T& value) {
    if (in_.size() < sizeof value) return false;
    std::memcpy(&value, in_.data(), sizeof value);
    if constexpr (sizeof(T) == 2) value = static_cast<T>(le16toh(value));
    if constexpr (sizeof(T) == 4) value = static_cast<T>(le32toh(value));
    in_ = in_.subspan(sizeof value);
    return true;
  }
  std::span<const std::byte> rest() const { return in_; }

 private:
  std::span<const std::byte> in_;
};

bool loopback(const GidEntry& gid) {
  return gid.ipv4_mapped() && (gid.ipv4() >> 24) == 127;
}

}  // namespace

size_t encoded_header_size(OfferForm form) noexcept {
  // magic, version, gid type, mtu, rd_atomic, pad, inline, send, recv, user length
  constexpr size_t kCommon = 4 + 2 + 1 + 1 + 1 + 1 + 4 + 4 + 4 + 2;
  // qpn, psn, qkey, lid, gid
  constexpr size_t kAddress = 4 + 4 + 4 + 2 + 16;
  static_assert(kCommon + kCmConnectUserData <= 56 && kCommon + kCmAcceptUserData <= 196,
                "a compact offer and its user data fit RDMA CM private data");
  return form == OfferForm::full ? kCommon + kAddress : kCommon;
}

std::vector<std::byte> encode(const HandshakeOffer& offer, OfferForm form) {
  RDMAKIT_REQUIRE(offer.user_data.size() <= 0xffff, "handshake user data above 64 KiB");
  Writer w;
  w.put(kMagic);
  w.put(offer.version);
  w.put(static_cast<uint8_t>(offer.gid_type));
  w.put(static_cast<uint8_t>(offer.mtu));
  w.put(offer.rd_atomic);
  w.put(uint8_t{0});
  w.put(offer.inline_size);
  w.put(offer.send_depth);
  w.put(offer.recv_depth);
  w.put(static_cast<uint16_t>(offer.user_data.size()));
  if (form == OfferForm::full) {
    w.put(offer.address.qpn);
    w.put(offer.address.psn);
    w.put(offer.address.qkey);
    w.put(offer.address.lid);
    w.put_bytes(std::as_bytes(std::span(offer.address.gid.raw)));
  }
  w.put_bytes(offer.user_data);
  return std::move(w.out);
}

std::error_code decode(std::span<const std::byte> bytes, OfferForm form, HandshakeOffer& out) {
  Reader r(bytes);
  uint32_t magic = 0;
  if (!r.get(magic) || magic != kMagic || !r.get(out.version))
    return make_error_code(Errc::handshake_malformed);
  if (out.version != kHandshakeVersion) return make_error_code(Errc::handshake_version);
  uint8_t gid_type = 0, mtu = 0, pad = 0;
  uint16_t user_len = 0;
  bool ok = r.get(gid_type) && r.get(mtu) && r.get(out.rd_atomic) && r.get(pad) &&
            r.get(out.inline_size) && r.get(out.send_depth) && r.get(out.recv_depth) &&
            r.get(user_len);
  if (ok && form == OfferForm::full) {
    ok = r.get(out.address.qpn) && r.get(out.address.psn) && r.get(out.address.qkey) &&
         r.get(out.address.lid) && r.rest().size() >= sizeof out.address.gid.raw;
    if (ok) {
      std::memcpy(out.address.gid.raw, r.rest().data(), sizeof out.address.gid.raw);
      r = Reader(r.rest().subspan(sizeof out.address.gid.raw));
    }
  }
  if (!ok || gid_type > static_cast<uint8_t>(GidType::roce_v2) || mtu < IBV_MTU_256 ||
      mtu > IBV_MTU_4096 || r.rest().size() < user_len ||
      // RDMA CM pads private data to a fixed size; a TCP frame has exactly the offer.
      (form == OfferForm::full && r.rest().size() != user_len))
    return make_error_code(Errc::handshake_malformed);
  out.gid_type = static_cast<GidType>(gid_type);
  out.mtu = static_cast<ibv_mtu>(mtu);
  out.user_data.assign(r.rest().begin(), r.rest().begin() + user_len);
  return {};
}

std::error_code check_compatible(const HandshakeOffer& ours, const HandshakeOffer& theirs,
                                 std::string& explanation) {
  if (theirs.version != ours.version) {
    explanation = "the peer speaks handshake version " + std::to_string(theirs.version) +
                  ", this side version " + std::to_string(ours.version) +
                  ": upgrade the older side";
    return make_error_code(Errc::handshake_version);
  }
  if (theirs.gid_type != ours.gid_type) {
    explanation = std::string("GID types differ: this side uses ") + to_string(ours.gid_type) +
                  ", the peer " + to_string(theirs.gid_type) +
                  "; packets of one type are never delivered to the other (choose the same "
                  "type on both sides, e.g. with RDMAKIT_GID_INDEX)";
    return make_error_code(Errc::handshake_mismatch);
  }
  const GidEntry mine{0, ours.address.gid, ours.gid_type};
  const GidEntry peer{0, theirs.address.gid, theirs.gid_type};
  if (mine.ipv4_mapped() && peer.ipv4_mapped() && loopback(mine) != loopback(peer)) {
    explanation = "subnets differ: this side's GID is " + mine.address() + ", the peer's " +
                  peer.address() +
                  "; a loopback address cannot reach another host's address (choose GIDs on "
                  "the same network, e.g. with RDMAKIT_GID_INDEX)";
    return make_error_code(Errc::handshake_mismatch);
  }
  if (!mine.ipv4_mapped() && !peer.ipv4_mapped() && ours.gid_type != GidType::roce_v2 &&
      std::memcmp(mine.gid.raw, peer.gid.raw, 8) != 0) {
    explanation = "subnet prefixes differ (" + mine.address() + " vs " + peer.address() +
                  "): the ports are on different subnets";
    return make_error_code(Errc::handshake_mismatch);
  }
  explanation.clear();
  return {};
}

Negotiated negotiate(const HandshakeOffer& ours, const HandshakeOffer& theirs) {
  Negotiated n;
  n.path.mtu = std::min(ours.mtu, theirs.mtu);
  n.path.initiator_depth = std::min(ours.rd_atomic, theirs.rd_atomic);
  n.path.responder_depth = n.path.initiator_depth;
  n.inline_size = std::min(ours.inline_size, theirs.inline_size);
  n.send_window = std::min(ours.send_depth, theirs.recv_depth);
  return n;
}

}  // namespace rdmakit

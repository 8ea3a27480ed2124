#include "rdmakit/error.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rdmakit {
namespace {

class VerbsCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "rdmakit.verbs"; }
  std::string message(int err) const override { return std::strerror(err); }
  std::error_condition default_error_condition(int err) const noexcept override {
    return std::generic_category().default_error_condition(err);
  }
};

class CompletionCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "rdmakit.completion"; }
  std::string message(int status) const override {
    return ibv_wc_status_str(static_cast<ibv_wc_status>(status));
  }
};

class RdmakitCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "rdmakit"; }
  std::string message(int e) const override {
    switch (static_cast<Errc>(e)) {
      case Errc::timed_out:
        return "timed out";
      case Errc::canceled:
        return "canceled";
      case Errc::peer_closed:
        return "peer closed the connection";
      case Errc::handshake_malformed:
        return "peer sent a malformed handshake";
      case Errc::handshake_version:
        return "peer speaks another handshake version";
      case Errc::handshake_mismatch:
        return "peers disagree on GID type or subnet";
      case Errc::rejected:
        return "connection rejected by the peer";
      case Errc::budget_exhausted:
        return "registered-memory budget exhausted";
      case Errc::grant_too_wide:
        return "grant asks for more access than the owner allows";
    }
    return "unknown rdmakit error";
  }
  std::error_condition default_error_condition(int e) const noexcept override {
    switch (static_cast<Errc>(e)) {
      case Errc::timed_out:
        return std::errc::timed_out;
      case Errc::canceled:
        return std::errc::operation_canceled;
      case Errc::peer_closed:
        return std::errc::connection_reset;
      case Errc::rejected:
        return std::errc::connection_refused;
      default:
        return {e, *this};
    }
  }
};

}  // namespace

const std::error_category& verbs_category() noexcept {
  static const VerbsCategory category;
  return category;
}

const std::error_category& completion_category() noexcept {
  static const CompletionCategory category;
  return category;
}

const std::error_category& rdmakit_category() noexcept {
  static const RdmakitCategory category;
  return category;
}

void throw_verbs_error(std::string_view verb, int err, std::string_view object) {
  std::string what(verb);
  what += " on ";
  what += object;
  throw Error(verbs_error(err), what);
}

void throw_error(std::error_code code, std::string_view context) {
  throw Error(code, std::string(context));
}

void programming_error(std::string_view message) noexcept {
  std::fprintf(stderr, "rdmakit: programming error: %.*s\n", static_cast<int>(message.size()),
               message.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace rdmakit

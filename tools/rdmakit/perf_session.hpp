// The benchmark's QPs: connecting them (TCP exchange or RDMA CM), the memory each one uses,
// and the state the engines keep per QP.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "perf_messages.hpp"
#include "perf_options.hpp"
#include "rdmakit/allocator.hpp"
#include "rdmakit/connection.hpp"

namespace rdmakit::tool {

// One QP of the run and its memory on this side.
struct Peer {
  Connection connection;
  uint32_t index = 0;    // the client's numbering, the same on both sides
  LocalBuffer slot;      // data: what this side writes, sends or reads into; the peer writes here
  LocalBuffer recv_buf;  // where receives land: the slot in send tests, else a control area
  LocalBuffer ctrl_out;  // the payload of the control messages this side sends
  RemoteBuffer remote;   // the peer's slot
  // Kept by the engines' receive paths.
  std::optional<Message> message;  // a control message not yet taken
  uint64_t data_received = 0;      // data SENDs received so far
};

// The QPs one thread drives, on one CQ, with one registered region.
struct Worker {
  std::shared_ptr<Resources> resources;
  RawRegion region;
  std::vector<Peer> peers;
};

// Receives each QP keeps posted: a send test's receiver needs many, everyone else only
// room for the control messages.
uint32_t receive_depth(const PerfOptions& options);

// Takes a control message the engine received on `peer` (a SEND_WITH_IMM). Returns what is
// wrong with it, or nullptr.
const char* take_message(Peer& peer, uint32_t imm, std::span<const std::byte> payload);

// Server: listens on options.port and accepts the client's QPs (bounded by the timeout).
Worker accept_peers(const PerfOptions& options);
// Client: one worker per thread, QP i on thread i % threads. Checks that the server runs the
// same test; throws PerfError naming the difference otherwise.
std::vector<Worker> connect_peers(const PerfOptions& options);

}  // namespace rdmakit::tool

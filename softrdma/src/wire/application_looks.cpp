#include "wire/application_looks.hpp"

#include "wire/link.hpp"
#include "wire/listener.hpp"

namespace softrdma::wire {

Arrivals look_at_sockets() {
  send_deferred_answers(looking_now());
  const Arrivals arrived = arrivals();
  if (arrived.responses) Link::take_arrived_responses();
  return arrived;
}

// Out of line: the post path of a process without sockets stays short.
[[gnu::noinline]] void look_after_post_now() {
  serve_arrived_requests(look_at_sockets());
}

}  // namespace softrdma::wire

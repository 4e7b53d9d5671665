// Bootstrap of the Gloo backend (internal to gloo_communicator.cc): the Gloo
// context of one rank, connected to every other rank through the Store, and
// the diagnosis of a failed connection.
//
// ConnectGloo makes a TCP device on GlooOptions::hostname; every rank
// publishes its pair addresses through the Store (Gloo's full-mesh
// rendezvous, under the keys "gloo/<rank>") and connects to every other rank
// within GlooOptions::connect_timeout. On failure it says why:
// RESOURCE_EXHAUSTED when the data-plane port range (listen_ports.h) ran
// out; the store's own status when the rendezvous through it failed
// (DEADLINE_EXCEEDED naming the missing rank's key); else UNAVAILABLE, naming
// the first peer this rank cannot reach and its address when a probe finds
// one ("rank 0 on 10.0.0.5 could not connect to rank 1 at 10.0.0.6:41234
// (w-2): Connection refused (gloo: ...)").
//
// Thread-safety: reentrant; IgnoreSigpipe may be called from any thread.
#ifndef YOKE_COLLECTIVE_GLOO_BOOTSTRAP_H_
#define YOKE_COLLECTIVE_GLOO_BOOTSTRAP_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/gloo_communicator.h"
#include "collective/store.h"
#include "gloo/context.h"

namespace yoke::collective {

// A Gloo timeout: whole milliseconds, at least 1.
inline std::chrono::milliseconds ToChronoMs(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

// Whether a Gloo exception's message says an operation timed out (its pairs
// write "Timed out" or "timed out").
inline bool IsGlooTimeout(std::string_view what) {
  return what.find("Timed out") != std::string_view::npos ||
         what.find("timed out") != std::string_view::npos;
}

// Gloo writes to its sockets with writev(), which raises SIGPIPE when the
// peer is gone, and SIGPIPE's default action kills the process: a dead peer
// must be an error, not our death. Sets SIGPIPE to SIG_IGN once, and only
// over the default disposition (a program that handles SIGPIPE itself keeps
// its handler).
void IgnoreSigpipe();

// The connected context of rank `rank` of `size` (both already checked),
// with the errors above, each led by "gloo: rank <rank> of <size> on
// <hostname>" unless it names the peer.
absl::StatusOr<std::shared_ptr<gloo::Context>> ConnectGloo(Store* store, int rank, int size,
                                                           const GlooOptions& options);

}  // namespace yoke::collective

#endif  // YOKE_COLLECTIVE_GLOO_BOOTSTRAP_H_

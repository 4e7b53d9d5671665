// The address a worker's peers reach it at ("advertised address").
//
// Trainers bind their data-plane listeners (Gloo pairs) to this address and
// publish it to the other ranks, so it must be an address of this machine
// that every other worker can route to. By default it is the local address
// of the route to the coordinator: the interface this machine would use to
// reach it, which on a flat cluster network is the one peers reach us on.
// WorkerConfig.advertise_address, --advertise-address and the environment
// variable YOKE_ADVERTISE_ADDRESS override it (in Kubernetes, the pod IP
// from the downward API).
//
// Thread-safe (no shared state).
#ifndef YOKE_WORKER_ADDRESS_H_
#define YOKE_WORKER_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"

namespace yoke::worker {

// Splits "host:port" or "[v6]:port" into host and port; INVALID_ARGUMENT
// naming `address` when it has no port.
absl::Status SplitHostPort(const std::string& address, std::string* host, std::string* port);

// The local IP address of the route from this machine (this network
// namespace) to `host_port`, found with a connected UDP socket: no packet is
// sent. UNAVAILABLE naming the address when the host does not resolve or no
// route leads there.
absl::StatusOr<std::string> LocalAddressTowards(const std::string& host_port);

// True for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopback(const std::string& host);

// The address to advertise: `configured` when set (an IP address or a host
// name of this machine), else LocalAddressTowards(coordinator). Refuses a
// loopback address while the coordinator is not on loopback, since no other
// machine could reach it (FAILED_PRECONDITION, saying why and how to set it).
absl::StatusOr<std::string> ResolveAdvertiseAddress(const std::string& configured,
                                                    const std::string& coordinator);

}  // namespace yoke::worker

#endif  // YOKE_WORKER_ADDRESS_H_

// absl::Status <-> grpc::Status, for the code on either side of a gRPC call
// (the coordinator's services, the client, the worker daemon, the
// coordinator-backed Store). The two share the canonical code numbers, so
// the code and the message cross unchanged; only OK drops its message.
//
// This is its own library, yoke_grpc_util, so that yoke_common does not
// link gRPC.
//
// Thread-safety: pure functions; safe from any thread.
#ifndef YOKE_NET_GRPC_STATUS_H_
#define YOKE_NET_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace yoke::common {

// The gRPC status of a handler's result: same code, same message.
grpc::Status ToGrpcStatus(const absl::Status& s);

// The absl status of a finished call: same code, same message.
absl::Status FromGrpcStatus(const grpc::Status& s);

}  // namespace yoke::common

#endif  // YOKE_NET_GRPC_STATUS_H_

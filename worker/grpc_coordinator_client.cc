// The worker daemon's gRPC client of the coordinator's WorkerControl
// service (NewGrpcCoordinatorClient in worker/daemon.h).
#include <chrono>
#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"
#include "net/grpc_status.h"
#include "proto/yoke/v1/coordinator.grpc.pb.h"
#include "worker/daemon.h"

namespace yoke::worker {
namespace {

class GrpcCoordinatorClient final : public CoordinatorClient {
 public:
  GrpcCoordinatorClient(const std::string& address,
                        std::shared_ptr<grpc::ChannelCredentials> credentials,
                        absl::Duration rpc_timeout)
      : timeout_(rpc_timeout) {
    grpc::ChannelArguments args;
    // gRPC's default reconnect backoff grows to two minutes; a restarted
    // coordinator must see its workers again within a heartbeat deadline.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    channel_ = grpc::CreateCustomChannel(address, std::move(credentials), args);
    stub_ = v1::WorkerControl::NewStub(channel_);
  }

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request) override {
    AwaitConnection();
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    v1::RegisterWorkerResponse response;
    absl::Status s = common::FromGrpcStatus(stub_->RegisterWorker(&ctx, request, &response));
    if (!s.ok()) return s;
    return response;
  }

  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request) override {
    AwaitConnection();
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    v1::HeartbeatResponse response;
    absl::Status s = common::FromGrpcStatus(stub_->Heartbeat(&ctx, request, &response));
    if (!s.ok()) return s;
    return response;
  }

 private:
  // While no call is in flight nothing polls a reconnecting channel but
  // gRPC's backup poller (every 5 s): a connection to a coordinator that
  // came back completes only seconds later, and a TLS handshake, which
  // needs several round trips, timed out before it finished. Waiting for
  // the channel here (at most a second) polls it, so the worker reconnects
  // at once; the call itself still fails fast with the connection's error.
  void AwaitConnection() {
    if (channel_->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) return;
    channel_->WaitForConnected(
        std::chrono::system_clock::now() +
        std::min(absl::ToChronoMilliseconds(timeout_), std::chrono::milliseconds(1000)));
  }

  std::chrono::system_clock::time_point Deadline() const {
    return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout_);
  }
  absl::Duration timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WorkerControl::Stub> stub_;
};

}  // namespace

std::unique_ptr<CoordinatorClient> NewGrpcCoordinatorClient(
    const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials,
    absl::Duration rpc_timeout) {
  return std::make_unique<GrpcCoordinatorClient>(address, std::move(credentials), rpc_timeout);
}

}  // namespace yoke::worker

#include "net/grpc_status.h"

#include <string>

#include "gtest/gtest.h"

namespace yoke::common {
namespace {

// Every canonical code, paired by name rather than by number, so a wrong
// cast (or a renumbering) fails here.
struct Pair {
  absl::StatusCode absl_code;
  grpc::StatusCode grpc_code;
};
constexpr Pair kPairs[] = {
    {absl::StatusCode::kCancelled, grpc::StatusCode::CANCELLED},
    {absl::StatusCode::kUnknown, grpc::StatusCode::UNKNOWN},
    {absl::StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
    {absl::StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
    {absl::StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
    {absl::StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS},
    {absl::StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED},
    {absl::StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
    {absl::StatusCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
    {absl::StatusCode::kAborted, grpc::StatusCode::ABORTED},
    {absl::StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE},
    {absl::StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED},
    {absl::StatusCode::kInternal, grpc::StatusCode::INTERNAL},
    {absl::StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
    {absl::StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS},
    {absl::StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED},
};

TEST(GrpcStatusTest, EveryCodeAndItsMessageCrossBothWays) {
  for (const Pair& p : kPairs) {
    const std::string msg = "job-7: something " + std::to_string(static_cast<int>(p.absl_code));
    grpc::Status g = ToGrpcStatus(absl::Status(p.absl_code, msg));
    EXPECT_EQ(g.error_code(), p.grpc_code) << msg;
    EXPECT_EQ(g.error_message(), msg);
    absl::Status a = FromGrpcStatus(grpc::Status(p.grpc_code, msg));
    EXPECT_EQ(a.code(), p.absl_code) << msg;
    EXPECT_EQ(a.message(), msg);
  }
}

TEST(GrpcStatusTest, OkIsOk) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status(grpc::StatusCode::OK, "ignored")).ok());
}

}  // namespace
}  // namespace yoke::common

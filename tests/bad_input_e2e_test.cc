// End to end: bad input never gets stored and never takes the coordinator
// down. Bad job files are refused by `yoke submit` with exit status 2 and a
// message naming the field; specs that skip the CLI's local checks (sent with
// the client library) are refused by the coordinator with INVALID_ARGUMENT;
// garbage bytes and a truncated protobuf on the gRPC port are refused; and
// through all of it the coordinator keeps serving and stores nothing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "client/client.h"
#include "config/config.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace yoke::e2e {
namespace {

// Writes `bytes` to a fresh TCP connection to `addr` and closes it.
void SendRaw(const std::string& addr, const std::string& bytes) {
  size_t colon = addr.rfind(':');
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(addr.substr(colon + 1), &port));
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  // Read whatever the server answers (a GOAWAY, an HTTP/2 SETTINGS frame or
  // nothing) until it closes or a second passes.
  timeval tv{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[256];
  while (read(fd, buf, sizeof(buf)) > 0) {
  }
  close(fd);
}

// Calls `method` with `body` as the raw request bytes; on success, stores the
// raw response bytes in `*out` if given.
grpc::Status RawCall(const std::string& addr, std::shared_ptr<grpc::ChannelCredentials> creds,
                     const std::string& method, const std::string& body,
                     std::string* out = nullptr) {
  auto channel = grpc::CreateChannel(addr, std::move(creds));
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice slice(body);
  grpc::ByteBuffer req(&slice, 1);
  grpc::CompletionQueue cq;
  auto call = stub.PrepareUnaryCall(&ctx, method, req, &cq);
  call->StartCall();
  grpc::ByteBuffer resp;
  grpc::Status status;
  call->Finish(&resp, &status, reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  cq.Next(&tag, &ok);
  if (out != nullptr && status.ok()) {
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(resp.Dump(&slices).ok());
    out->clear();
    for (const grpc::Slice& s : slices) {
      out->append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return status;
}

TEST(BadInputE2ETest, RefusedWithTheFieldAndNothingStored) {
  TestCluster cluster(1, "--data-root /usr/share/datasets");
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  const pid_t coordinator = cluster.state().coordinator_pid;
  const std::string mlp = Config("fashion_mnist_mlp.yaml");

  auto expect_refused = [&](const std::string& args, const std::string& want) {
    RunResult r = cluster.Yoke("submit " + args, true);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << args << "\n" << r.out;
  };

  // Malformed YAML: file:line in the message.
  std::string bad = cluster.dir() + "/malformed.yaml";
  std::ofstream(bad) << "name: x\nmodel: {zoo: mlp\ntraining:\n  epochs: 1\n";
  expect_refused(bad, "malformed.yaml:");
  // An unknown field, a negative batch size.
  expect_refused(mlp + " --set training.optimzer.lr=1", "did you mean 'optimizer'");
  expect_refused(mlp + " --set training.batch_size=-64",
                 "training.batch_size: must be > 0, got -64");
  // A dataset outside the coordinator's data roots: only the coordinator
  // knows its roots, so this one is its INVALID_ARGUMENT.
  expect_refused(mlp + " --set data.train.images=/etc/passwd", "data.train.images");

  // The coordinator checks on its own what the CLI checks locally.
  auto spec = common::LoadJobSpecFile(mlp, {"training.batch_size=-64"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  client::CoordinatorClient client(cluster.address(), cluster.ClientOptions());
  auto id = client.SubmitJob(*spec);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << id.status();
  EXPECT_NE(id.status().message().find("training.batch_size"), absl::string_view::npos)
      << id.status();
  EXPECT_EQ(client.SubmitJob(v1::JobSpec()).status().code(), absl::StatusCode::kInvalidArgument);

  // Garbage on the port, an HTTP/2 preface followed by junk, and a
  // truncated SubmitJobRequest inside a well-formed gRPC call.
  SendRaw(cluster.address(), "this is not http/2 at all\r\n\r\n\x01\x02\x03");
  SendRaw(cluster.address(), std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") +
                                 std::string("\xff\xff\xff\x09\x00garbage", 12));
  v1::SubmitJobRequest req;
  *req.mutable_spec() = *common::LoadJobSpecFile(mlp, {});
  std::string wire = req.SerializeAsString();
  grpc::Status st = RawCall(cluster.address(), cluster.Credentials(),
                            "/yoke.v1.Coordinator/SubmitJob", wire.substr(0, wire.size() / 2));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  st = RawCall(cluster.address(), cluster.Credentials(), "/yoke.v1.Coordinator/GetJob",
               std::string("\x0a\xff\xff", 3));
  EXPECT_FALSE(st.ok());

  // Still up, still serving, and nothing was stored.
  EXPECT_TRUE(Alive(coordinator));
  RunResult r = cluster.Yoke("jobs --output json");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, "[]\n");
  // Standard health checking answers SERVING: HealthCheckResponse field 1
  // (status) = 1; NOT_SERVING would be 2.
  std::string health;
  st = RawCall(cluster.address(), cluster.Credentials(), "/grpc.health.v1.Health/Check", "",
               &health);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(health, std::string("\x08\x01", 2));
  r = cluster.Yoke("get job-nope", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("job-nope"), std::string::npos) << r.out;

  // And a good job is still accepted afterwards (then cancelled: this test
  // does not need it to train).
  r = cluster.Yoke("submit " + mlp + " --set training.max_steps=1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Alive(coordinator));
}

}  // namespace
}  // namespace yoke::e2e

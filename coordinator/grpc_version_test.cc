// GetVersion and SubmitJob's spec_yaml, over loopback gRPC: the version is
// common/version.h's, and a job sent as YAML text plus overrides is stored
// exactly as the same file sent as a JobSpec parsed by the CLI.
#include <memory>
#include <string>
#include <vector>

#include "common/version.h"
#include "config/config.h"
#include "coordinator/grpc_service.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "jobspec/job_validate.h"

namespace yoke::server {
namespace {

constexpr char kYaml[] = R"(name: from-yaml
model: {zoo: mlp, hidden: [8]}
data:
  train: {format: synthetic, shape: [4, 4, 1], num_classes: 2, num_examples: 64}
training:
  epochs: 1
  batch_size: 8
  optimizer: {type: sgd, lr: 0.1}
)";

class GrpcVersionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = Coordinator::Create(&store_, common::RealClock::Get(), CoordinatorOptions());
    ASSERT_TRUE(c.ok()) << c.status();
    coord_ = std::move(*c);
    ServerOptions so;
    so.listen = "127.0.0.1:0";
    auto s = CoordinatorServer::Start(coord_.get(), so);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    server_.reset();
    coord_.reset();
  }

  grpc::Status Submit(const v1::SubmitJobRequest& req, std::string* id = nullptr) {
    grpc::ClientContext ctx;
    v1::SubmitJobResponse resp;
    grpc::Status s = stub_->SubmitJob(&ctx, req, &resp);
    if (id != nullptr) *id = resp.job_id();
    return s;
  }

  v1::JobSpec StoredSpec(const std::string& id) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    grpc::Status s = stub_->GetJob(&ctx, req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job.spec();
  }

  v1::SubmitJobRequest YamlRequest(const std::string& yaml, std::vector<std::string> overrides) {
    v1::SubmitJobRequest req;
    req.set_spec_yaml(yaml);
    for (const std::string& o : overrides) req.add_overrides(o);
    req.set_spec_yaml_name("job.yaml");
    return req;
  }

  InMemoryJobStore store_;
  std::unique_ptr<Coordinator> coord_;
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(GrpcVersionTest, GetVersionReportsTheSharedConstants) {
  grpc::ClientContext ctx;
  v1::GetVersionResponse resp;
  grpc::Status s = stub_->GetVersion(&ctx, v1::GetVersionRequest(), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.version(), common::kYokeVersion);
  EXPECT_EQ(resp.min_client_version(), common::kMinClientVersion);
  EXPECT_FALSE(resp.version().empty());
}

TEST_F(GrpcVersionTest, YamlAndOverridesGiveTheJobTheCliSends) {
  const std::vector<std::string> sets = {"training.epochs=3", "model.hidden=[16, 4]"};
  auto cli = common::LoadJobSpecString(kYaml, sets, "job.yaml");
  ASSERT_TRUE(cli.ok()) << cli.status();
  v1::SubmitJobRequest as_spec;
  *as_spec.mutable_spec() = *cli;
  std::string cli_id, yaml_id;
  ASSERT_TRUE(Submit(as_spec, &cli_id).ok());
  grpc::Status s = Submit(YamlRequest(kYaml, sets), &yaml_id);
  ASSERT_TRUE(s.ok()) << s.error_message();
  v1::JobSpec a = StoredSpec(cli_id), b = StoredSpec(yaml_id);
  EXPECT_EQ(b.training().epochs(), 3);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(a, b))
      << a.DebugString() << "\nvs\n"
      << b.DebugString();
}

TEST_F(GrpcVersionTest, BadYamlIsInvalidArgumentNamingTheFieldAndTheSource) {
  grpc::Status s = Submit(YamlRequest(kYaml, {"training.epochz=3"}));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("--set training.epochz=3"), std::string::npos)
      << s.error_message();
  s = Submit(YamlRequest(std::string(kYaml) + "bogus: 1\n", {}));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("job.yaml:9:1: bogus"), std::string::npos) << s.error_message();
  // Parsed fine, then validated as any submitted spec is.
  s = Submit(YamlRequest(kYaml, {"training.batch_size=-8"}));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("training.batch_size"), std::string::npos) << s.error_message();

  v1::SubmitJobRequest both = YamlRequest(kYaml, {});
  both.mutable_spec()->set_name("x");
  EXPECT_EQ(Submit(both).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::SubmitJobRequest loose;
  loose.add_overrides("training.epochs=2");
  EXPECT_EQ(Submit(loose).error_message(),
            "overrides: only with spec_yaml (apply them to the spec you send)");
  s = Submit(YamlRequest(std::string(kMaxSubmitYamlBytes + 1, '#'), {}));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("spec_yaml: "), std::string::npos) << s.error_message();
}

}  // namespace
}  // namespace yoke::server

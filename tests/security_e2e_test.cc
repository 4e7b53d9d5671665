// End to end: the coordinator `yoke up` starts serves only mutual TLS, and
// every RPC of its three services refuses a caller without a certificate,
// with one from another CA, with an expired one and with the wrong role
// (UNAUTHENTICATED / PERMISSION_DENIED). The attacks a hostile client made
// on the unauthenticated coordinator (a fake worker, a forged heartbeat of
// another worker, re-registering or draining another worker, rendezvous
// writes into a running job, cancelling someone else's job) are replayed
// with real certificates while a 2-worker job trains, and the job succeeds
// unaffected. A trainer's rendezvous secret opens its own attempt's keys
// and no other job's. Bearer tokens work, keep their role and die when
// revoked.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/quote.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "proto/yoke/v1/coordinator.grpc.pb.h"
#include "security/certs.h"
#include "security/tls_credentials.h"
#include "tests/e2e_util.h"

namespace yoke::e2e {
namespace {

using common::KeyCert;
using common::Role;

constexpr auto kUnauthenticated = grpc::StatusCode::UNAUTHENTICATED;
constexpr auto kDenied = grpc::StatusCode::PERMISSION_DENIED;

// Certificates minted in-process from the cluster's CA (DIR/tls/ca), or
// from a CA of our own.
class Mint {
 public:
  explicit Mint(const std::string& cluster_dir) {
    auto ca = common::ReadCaDir(cluster_dir + "/tls/ca");
    EXPECT_TRUE(ca.ok()) << ca.status();
    if (ca.ok()) ca_ = *ca;
    other_ca_ = *common::CreateCa("impostor", absl::Hours(24));
  }
  const std::string& ca_pem() const { return ca_.cert_pem; }

  KeyCert Issue(Role role, const std::string& name, bool other_ca = false,
                bool expired = false) const {
    common::IssueOptions o;
    o.role = role;
    o.name = name;
    if (expired) {
      o.not_before = absl::Now() - absl::Hours(48);
      o.validity = absl::Hours(24);
    }
    auto c = common::IssueCert(other_ca ? other_ca_ : ca_, o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : KeyCert();
  }

  // A channel trusting the cluster CA and presenting `leaf` (none if empty).
  std::shared_ptr<grpc::Channel> Channel(const std::string& address, const KeyCert& leaf = {},
                                         const std::string& token = "") const {
    common::Credentials c;
    c.ca_pem = ca_.cert_pem;
    c.leaf = leaf;
    return grpc::CreateChannel(address, common::TlsChannelCredentials(c, token));
  }

 private:
  KeyCert ca_, other_ca_;
};

std::unique_ptr<grpc::ClientContext> Context(const std::string& secret = "") {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!secret.empty()) ctx->AddMetadata("yoke-rendezvous-secret", secret);
  return ctx;
}

// Every method of the three services, called with harmless arguments.
const std::vector<std::string> kMethods = {
    "SubmitJob",  "GetJob",        "ListJobs",     "CancelJob",   "WatchJob",
    "GetJobLogs", "ListWorkers",   "CreateToken",  "RevokeToken", "RegisterWorker",
    "Heartbeat",  "RendezvousPut", "RendezvousGet"};

grpc::Status Call(const std::shared_ptr<grpc::Channel>& ch, const std::string& method,
                  const std::string& job_id = "job-000001") {
  auto coord = v1::Coordinator::NewStub(ch);
  auto wc = v1::WorkerControl::NewStub(ch);
  auto kv = v1::Rendezvous::NewStub(ch);
  auto ctx = Context();
  if (method == "SubmitJob") {
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_name("x");
    v1::SubmitJobResponse resp;
    return coord->SubmitJob(ctx.get(), req, &resp);
  }
  if (method == "GetJob" || method == "CancelJob") {
    v1::Job resp;
    if (method == "GetJob") {
      v1::GetJobRequest req;
      req.set_job_id(job_id);
      return coord->GetJob(ctx.get(), req, &resp);
    }
    v1::CancelJobRequest req;
    req.set_job_id(job_id);
    return coord->CancelJob(ctx.get(), req, &resp);
  }
  if (method == "ListJobs") {
    v1::ListJobsResponse resp;
    return coord->ListJobs(ctx.get(), v1::ListJobsRequest(), &resp);
  }
  if (method == "WatchJob") {
    v1::WatchJobRequest req;
    req.set_job_id(job_id);
    auto reader = coord->WatchJob(ctx.get(), req);
    v1::JobEvent ev;
    if (!reader->Read(&ev)) return reader->Finish();  // refused: no event
    ctx->TryCancel();                                 // the first event came: enough
    reader->Finish();
    return grpc::Status::OK;
  }
  if (method == "GetJobLogs") {
    v1::GetJobLogsRequest req;
    req.set_job_id(job_id);
    auto reader = coord->GetJobLogs(ctx.get(), req);
    v1::LogLine line;
    while (reader->Read(&line)) {
    }
    return reader->Finish();
  }
  if (method == "ListWorkers") {
    v1::ListWorkersResponse resp;
    return coord->ListWorkers(ctx.get(), v1::ListWorkersRequest(), &resp);
  }
  if (method == "CreateToken") {
    v1::CreateTokenRequest req;
    req.set_role("admin");
    req.set_name("intruder");
    req.set_ttl_seconds(3600);
    v1::CreateTokenResponse resp;
    return coord->CreateToken(ctx.get(), req, &resp);
  }
  if (method == "RevokeToken") {
    v1::RevokeTokenRequest req;
    req.set_id("0123456789abcdef");
    v1::RevokeTokenResponse resp;
    return coord->RevokeToken(ctx.get(), req, &resp);
  }
  if (method == "RegisterWorker") {
    v1::RegisterWorkerRequest req;
    req.set_hostname("evil");
    req.add_devices()->set_kind("cpu");
    v1::RegisterWorkerResponse resp;
    return wc->RegisterWorker(ctx.get(), req, &resp);
  }
  if (method == "Heartbeat") {
    v1::HeartbeatRequest req;
    req.set_worker_id("w-1");
    v1::HeartbeatResponse resp;
    return wc->Heartbeat(ctx.get(), req, &resp);
  }
  if (method == "RendezvousPut") {
    v1::KvPutRequest req;
    req.set_job_id(job_id);
    req.set_attempt(1);
    req.set_key("hang/request/0");
    req.set_value("x");
    v1::KvPutResponse resp;
    return kv->Put(ctx.get(), req, &resp);
  }
  v1::KvGetRequest req;
  req.set_job_id(job_id);
  req.set_attempt(1);
  req.set_key("data-parallel/rank/0");
  v1::KvGetResponse resp;
  return kv->Get(ctx.get(), req, &resp);
}

TEST(SecurityE2ETest, EveryRpcRefusesStrangersAndTheWrongRole) {
  TestCluster cluster(1);
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  Mint mint(cluster.dir());
  const std::string addr = cluster.address();

  // Plaintext does not even reach the services.
  {
    auto ch = grpc::CreateChannel(addr, grpc::InsecureChannelCredentials());
    EXPECT_EQ(Call(ch, "ListJobs").error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  const KeyCert no_cert;
  const KeyCert foreign = mint.Issue(Role::kAdmin, "admin", /*other_ca=*/true);
  const KeyCert expired = mint.Issue(Role::kAdmin, "admin", false, /*expired=*/true);
  for (const std::string& m : kMethods) {
    for (const auto& [what, leaf] :
         {std::pair{"no certificate", no_cert}, std::pair{"another CA's certificate", foreign},
          std::pair{"an expired certificate", expired}}) {
      grpc::Status s = Call(mint.Channel(addr, leaf), m);
      EXPECT_EQ(s.error_code(), kUnauthenticated)
          << m << " with " << what << ": " << s.error_message();
    }
  }
  // The wrong role: a viewer may only look; a worker may only be a worker.
  const KeyCert viewer = mint.Issue(Role::kViewer, "carol");
  const KeyCert worker = mint.Issue(Role::kWorker, "w-1");
  const KeyCert submitter = mint.Issue(Role::kSubmitter, "bob");
  for (const std::string& m : kMethods) {
    const bool viewer_may = m == "GetJob" || m == "ListJobs" || m == "WatchJob" ||
                            m == "GetJobLogs" || m == "ListWorkers";
    grpc::Status s = Call(mint.Channel(addr, viewer), m);
    if (viewer_may) {
      EXPECT_NE(s.error_code(), kDenied) << m << ": " << s.error_message();
      EXPECT_NE(s.error_code(), kUnauthenticated) << m << ": " << s.error_message();
    } else {
      EXPECT_EQ(s.error_code(), kDenied) << "viewer calling " << m << ": " << s.error_message();
    }
    const bool worker_may = m == "RegisterWorker" || m == "Heartbeat";
    s = Call(mint.Channel(addr, worker), m);
    if (!worker_may) {
      EXPECT_EQ(s.error_code(), kDenied) << "worker calling " << m << ": " << s.error_message();
    }
    const bool submitter_denied = m == "CreateToken" || m == "RevokeToken" ||
                                  m == "RegisterWorker" || m == "Heartbeat" ||
                                  m == "RendezvousPut" || m == "RendezvousGet";
    s = Call(mint.Channel(addr, submitter), m);
    if (submitter_denied) {
      EXPECT_EQ(s.error_code(), kDenied) << "submitter calling " << m << ": " << s.error_message();
    }
  }
  // The refusals name the method and the caller.
  grpc::Status s = Call(mint.Channel(addr, viewer), "SubmitJob");
  EXPECT_NE(s.error_message().find("SubmitJob"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("viewer 'carol'"), std::string::npos) << s.error_message();
}

// The server reflection service on `channel`: the status of a list_services
// call, and the reply's bytes in `reply`.
grpc::Status CallReflection(const std::shared_ptr<grpc::Channel>& channel, std::string* reply) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue cq;
  auto call =
      stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  cq.Next(&tag, &ok);
  // ServerReflectionRequest{list_services: ""}: field 7, an empty string.
  grpc::Slice slice(std::string("\x3a\x00", 2));
  grpc::ByteBuffer req(&slice, 1);
  call->WriteLast(req, grpc::WriteOptions(), reinterpret_cast<void*>(2));
  cq.Next(&tag, &ok);
  grpc::ByteBuffer resp;
  call->Read(&resp, reinterpret_cast<void*>(3));
  cq.Next(&tag, &ok);
  if (ok) {
    std::vector<grpc::Slice> slices;
    if (resp.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) {
        reply->append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(4)) {
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

// What an authenticated submitter sends is bounded: the priority by its
// role, names by their characters, and every echo of its input to 200 bytes
// with control bytes escaped. Reflection, which would list every service to
// anyone, is not served by a secure coordinator at all.
TEST(SecurityE2ETest, SubmittersCannotRaisePriorityOrSmuggleControlBytes) {
  TestCluster cluster(1);
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  Mint mint(cluster.dir());
  const std::string addr = cluster.address();
  auto submit = [&](const KeyCert& who, int priority, const std::string& name) {
    auto coord = v1::Coordinator::NewStub(mint.Channel(addr, who));
    v1::SubmitJobRequest req;
    req.set_priority(priority);
    req.mutable_spec()->set_name(name);  // no model: valid priorities get INVALID_ARGUMENT
    v1::SubmitJobResponse resp;
    auto ctx = Context();
    return coord->SubmitJob(ctx.get(), req, &resp);
  };
  const KeyCert bob = mint.Issue(Role::kSubmitter, "bob");
  const KeyCert admin = mint.Issue(Role::kAdmin, "root");
  grpc::Status s = submit(bob, 5, "x");
  EXPECT_EQ(s.error_code(), kDenied) << s.error_message();
  EXPECT_NE(s.error_message().find("only an admin may raise"), std::string::npos)
      << s.error_message();
  s = submit(bob, -5, "x");  // lowering is allowed: the spec is what fails
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(s.error_message().find("priority"), std::string::npos) << s.error_message();
  s = submit(admin, 5, "x");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(s.error_message().find("priority"), std::string::npos) << s.error_message();
  s = submit(admin, 2147483647, "x");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("priority: must be within [-1000, 1000]"), std::string::npos)
      << s.error_message();

  const std::string hostile("innocent\x1b]0;owned\a\x1b[2J\x1b[H\0hidden", 32);
  s = submit(bob, 0, hostile);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("name: control characters are not allowed"), std::string::npos)
      << s.error_message();
  EXPECT_FALSE(common::HasControlChar(s.error_message())) << s.error_message();

  // A 100 KB job id comes back quoted, not whole.
  auto coord = v1::Coordinator::NewStub(mint.Channel(addr, bob));
  v1::GetJobRequest get;
  get.set_job_id(std::string(100'000, 'j') + "\x1b[2J");
  v1::Job job;
  auto ctx = Context();
  s = coord->GetJob(ctx.get(), get, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message().size();
  EXPECT_LT(s.error_message().size(), 300u);
  EXPECT_NE(s.error_message().find("(+99804 bytes)"), std::string::npos) << s.error_message();

  // CreateToken's name is refused with its control bytes escaped.
  v1::CreateTokenRequest token;
  token.set_role("viewer");
  token.set_name(std::string("ci\x1b[2J\0x", 8));
  token.set_ttl_seconds(60);
  v1::CreateTokenResponse created;
  auto admin_coord = v1::Coordinator::NewStub(mint.Channel(addr, admin));
  ctx = Context();
  s = admin_coord->CreateToken(ctx.get(), token, &created);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("'ci\\x1b[2J\\x00x'"), std::string::npos) << s.error_message();
  EXPECT_FALSE(common::HasControlChar(s.error_message())) << s.error_message();

  for (const auto& [who, leaf] :
       {std::pair{"no certificate", KeyCert()}, std::pair{"an admin", admin}}) {
    std::string reply;
    s = CallReflection(mint.Channel(addr, leaf), &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED) << who << ": " << s.error_message();
    EXPECT_EQ(reply.find("yoke.v1.Coordinator"), std::string::npos) << who;
  }
}

// The environment of the first trainer process under `worker`.
std::string TrainerEnv(pid_t worker, const std::string& name) {
  for (pid_t t : ChildrenOf(worker, "yoke-trainer")) {
    std::ifstream in("/proc/" + std::to_string(t) + "/environ", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string env = ss.str();
    const std::string key = name + "=";
    size_t p = env.find(key);
    if (p == std::string::npos) continue;
    return env.substr(p + key.size(), env.find('\0', p) - p - key.size());
  }
  return "";
}

// w-1 (through `wc1`) and w-2 (through `wc2`) each acting as the other during
// job `id`'s first attempt: all PERMISSION_DENIED.
void ExpectWorkersCannotActAsEachOther(v1::WorkerControl::Stub* wc1, v1::WorkerControl::Stub* wc2,
                                       const std::string& id) {
  // w-1 forging w-2's result for the running job.
  {
    v1::HeartbeatRequest req;
    req.set_worker_id("w-2");
    v1::AttemptStatus* st = req.add_attempts();
    st->set_job_id(id);
    st->set_attempt(1);
    st->set_phase(v1::AttemptStatus::EXITED);
    st->mutable_result()->set_test_accuracy(0.999);
    v1::HeartbeatResponse resp;
    auto ctx = Context();
    grpc::Status r = wc1->Heartbeat(ctx.get(), req, &resp);
    EXPECT_EQ(r.error_code(), kDenied) << r.error_message();
    // ...or draining it.
    req.clear_attempts();
    req.set_draining(true);
    ctx = Context();
    EXPECT_EQ(wc1->Heartbeat(ctx.get(), req, &resp).error_code(), kDenied);
  }
  // w-2 registering again as w-1 (which would kill w-1's share of the job).
  {
    v1::RegisterWorkerRequest req;
    req.set_worker_id("w-1");
    req.set_hostname("evil");
    req.add_devices()->set_kind("cpu");
    v1::RegisterWorkerResponse resp;
    auto ctx = Context();
    grpc::Status r = wc2->RegisterWorker(ctx.get(), req, &resp);
    EXPECT_EQ(r.error_code(), kDenied) << r.error_message();
    EXPECT_NE(r.error_message().find("w-2"), std::string::npos) << r.error_message();
  }
}

// Rendezvous calls on job `id`'s first attempt at `addr`: writes without
// the attempt's secret (`secret`) are denied, and the secret opens that
// attempt's keys only.
void ExpectOnlyTheSecretOpensTheAttemptsKeys(const Mint& mint, const std::string& addr,
                                             const std::string& id, const std::string& secret) {
  // Rendezvous writes into the running attempt without its secret, with a
  // made-up one, or as a submitter.
  auto kv_admin_less =
      v1::Rendezvous::NewStub(mint.Channel(addr, mint.Issue(Role::kSubmitter, "bob")));
  for (const char* key : {"data-parallel/gloo/0", "hang/request/0"}) {
    v1::KvPutRequest req;
    req.set_job_id(id);
    req.set_attempt(1);
    req.set_key(key);
    req.set_value("garbage");
    v1::KvPutResponse resp;
    auto ctx = Context();
    EXPECT_EQ(kv_admin_less->Put(ctx.get(), req, &resp).error_code(), kDenied) << key;
    ctx = Context(std::string(64, '0'));
    EXPECT_EQ(kv_admin_less->Put(ctx.get(), req, &resp).error_code(), kDenied) << key;
  }
  // The real secret (read from a trainer, as only that trainer could) opens
  // its own attempt's keys, and no other job's.
  {
    auto kv = v1::Rendezvous::NewStub(mint.Channel(addr));
    v1::KvPutRequest put;
    put.set_job_id(id);
    put.set_attempt(1);
    put.set_key("security-test/own");
    put.set_value("ok");
    v1::KvPutResponse presp;
    auto ctx = Context(secret);
    grpc::Status r = kv->Put(ctx.get(), put, &presp);
    EXPECT_TRUE(r.ok()) << r.error_message();
    v1::KvGetRequest get;
    get.set_job_id("job-000099");
    get.set_attempt(1);
    get.set_key("data-parallel/rank/0");
    v1::KvGetResponse gresp;
    ctx = Context(secret);
    EXPECT_EQ(kv->Get(ctx.get(), get, &gresp).error_code(), kDenied);
    get.set_job_id(id);
    get.set_attempt(2);  // the same job's next attempt is another namespace
    ctx = Context(secret);
    EXPECT_EQ(kv->Get(ctx.get(), get, &gresp).error_code(), kDenied);
  }
}

TEST(SecurityE2ETest, AttacksFailWhileAJobTrainsAndTheJobSucceeds) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  Mint mint(cluster.dir());
  const std::string addr = cluster.address();

  // A 2-worker job that runs long enough for every attack to land mid-run.
  RunResult s = cluster.Yoke("submit " + Config("fashion_mnist_mlp.yaml") +
                                 " --set training.epochs=3 --set distribution.workers=2"
                                 " --set data.train.num_examples=20000 --set training.threads=1",
                             true);
  ASSERT_EQ(s.exit_code, 0) << s.out;
  const std::string id = s.out.substr(0, s.out.find('\n'));
  std::string secret;
  ASSERT_TRUE(WaitFor(
      [&] {
        secret = TrainerEnv(cluster.state().worker_pids[0], "YOKE_RENDEZVOUS_SECRET");
        return !secret.empty();
      },
      std::chrono::seconds(60)))
      << cluster.Logs();

  const KeyCert w1 = mint.Issue(Role::kWorker, "w-1");
  const KeyCert w2 = mint.Issue(Role::kWorker, "w-2");
  auto wc1 = v1::WorkerControl::NewStub(mint.Channel(addr, w1));
  auto wc2 = v1::WorkerControl::NewStub(mint.Channel(addr, w2));

  // A fake worker: another CA's certificate, or a viewer's.
  EXPECT_EQ(Call(mint.Channel(addr, mint.Issue(Role::kWorker, "w-9", true)), "RegisterWorker")
                .error_code(),
            kUnauthenticated);
  EXPECT_EQ(
      Call(mint.Channel(addr, mint.Issue(Role::kViewer, "w-9")), "RegisterWorker").error_code(),
      kDenied);
  ExpectWorkersCannotActAsEachOther(wc1.get(), wc2.get(), id);
  ExpectOnlyTheSecretOpensTheAttemptsKeys(mint, addr, id, secret);
  // Someone else's job cannot be cancelled by a submitter.
  {
    grpc::Status r = Call(mint.Channel(addr, mint.Issue(Role::kSubmitter, "bob")), "CancelJob", id);
    EXPECT_EQ(r.error_code(), kDenied) << r.error_message();
    EXPECT_NE(r.error_message().find("admin"), std::string::npos) << r.error_message();
  }

  // Meanwhile the job trained on, and ends as if nothing happened.
  RunResult w = cluster.Yoke("watch " + id, true);
  v1::Job job;
  ASSERT_TRUE(cluster.GetJob(id, &job));
  EXPECT_EQ(job.state(), v1::JOB_SUCCEEDED) << w.out << cluster.Logs();
  EXPECT_EQ(job.attempts_size(), 1) << job.DebugString();
  EXPECT_EQ(job.history_size(), 3);
  EXPECT_NE(job.result().test_accuracy(), 0.999);
  EXPECT_EQ(job.owner(), "admin");
  RunResult ws = cluster.Yoke("workers -o json");
  EXPECT_EQ(ws.out.find("draining"), std::string::npos) << ws.out;
}

TEST(SecurityE2ETest, TokensKeepTheirRoleAndDieWhenRevoked) {
  TestCluster cluster(1);
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  // Credentials with only the CA: what an orchestration system holds.
  const std::string ca_only = cluster.dir() + "/ca-only";
  std::filesystem::create_directories(ca_only);
  std::filesystem::copy_file(cluster.dir() + "/tls/ca/ca.crt", ca_only + "/ca.crt");

  auto create = [&](const std::string& role, const std::string& name) {
    RunResult r = cluster.Yoke("token create --role " + role + " --name " + name + " --ttl 1h");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return r.out.substr(0, r.out.find('\n'));
  };
  const std::string ci = create("submitter", "ci");
  const std::string grafana = create("viewer", "grafana");
  ASSERT_EQ(ci.rfind("yoke_", 0), 0u) << ci;

  // `yoke up` printed where the dashboard and /metrics are; a viewer's token
  // opens /metrics there, and nothing opens it without one.
  const std::string kDashboard = "dashboard and /metrics at http://";
  const size_t at = cluster.up_output().find(kDashboard);
  ASSERT_NE(at, std::string::npos) << cluster.up_output();
  std::string http = cluster.up_output().substr(at + kDashboard.size());
  http = http.substr(0, http.find('/'));
  if (Sh("command -v curl >/dev/null").exit_code == 0) {
    const std::string get = "curl -s --max-time 10 -o /dev/null -w '%{http_code}' ";
    EXPECT_EQ(
        Sh(get + "-H 'Authorization: Bearer " + grafana + "' http://" + http + "/metrics").out,
        "200")
        << http;
    EXPECT_EQ(Sh(get + "http://" + http + "/metrics").out, "401") << http;
  } else {
    std::fprintf(stderr, "curl is not installed: the printed dashboard address is not fetched\n");
  }
  auto as = [&](const std::string& token, const std::string& args) {
    return cluster.Yoke(args + " --tls-dir " + ca_only + " --token " + token, true);
  };
  // No token, no certificate: refused.
  RunResult r = cluster.Yoke("jobs --tls-dir " + ca_only, true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("no client certificate and no bearer token"), std::string::npos) << r.out;

  const std::string job = Config("fashion_mnist_mlp.yaml") +
                          " --set training.epochs=1 --set data.train.num_examples=2000";
  r = as(ci, "submit " + job);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string id = r.out.substr(0, r.out.find('\n'));
  v1::Job j;
  ASSERT_TRUE(cluster.GetJob(id, &j));
  EXPECT_EQ(j.owner(), "ci");
  r = as(grafana, "submit " + job);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("not allowed for viewer 'grafana' (token)"), std::string::npos) << r.out;
  EXPECT_EQ(as(grafana, "jobs").exit_code, 0);
  // A submitter cancels its own job.
  r = as(ci, "cancel " + id);
  EXPECT_EQ(r.exit_code, 0) << r.out;

  // Revoked: refused from then on.
  const std::string ci_id = ci.substr(5, 16);
  r = cluster.Yoke("token revoke " + ci_id, true);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = as(ci, "jobs");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("revoked"), std::string::npos) << r.out;
  // A forged token (right id, wrong secret) tells nothing.
  std::string forged = grafana;
  forged.back() = forged.back() == 'a' ? 'b' : 'a';
  r = as(forged, "jobs");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("unknown or wrong secret"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace yoke::e2e

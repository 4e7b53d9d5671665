#include "security/certs.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace yoke::common {
namespace {

class CertsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ca_ = new KeyCert(*CreateCa("test", absl::Hours(24)));
    other_ca_ = new KeyCert(*CreateCa("other", absl::Hours(24)));
  }
  static KeyCert Issue(Role role, const std::string& name, const KeyCert& ca = *ca_) {
    IssueOptions o;
    o.role = role;
    o.name = name;
    auto c = IssueCert(ca, o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : KeyCert();
  }
  static KeyCert* ca_;
  static KeyCert* other_ca_;
};
KeyCert* CertsTest::ca_ = nullptr;
KeyCert* CertsTest::other_ca_ = nullptr;

TEST_F(CertsTest, AnIssuedCertificateVerifiesAsItsRoleAndName) {
  auto v = CertVerifier::Create(ca_->cert_pem);
  ASSERT_TRUE(v.ok()) << v.status();
  for (Role r :
       {Role::kViewer, Role::kSubmitter, Role::kAdmin, Role::kWorker, Role::kCoordinator}) {
    const std::string name = std::string(RoleName(r)) + "-1";
    auto id = v->Verify(Issue(r, name).cert_pem, absl::Now());
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(id->role, r);
    EXPECT_EQ(id->name, name);
    EXPECT_GT(id->not_after, absl::Now() + absl::Hours(24 * 300));
  }
}

TEST_F(CertsTest, AnotherCasCertificateIsRefused) {
  auto v = CertVerifier::Create(ca_->cert_pem);
  ASSERT_TRUE(v.ok());
  auto id = v->Verify(Issue(Role::kAdmin, "mallory", *other_ca_).cert_pem, absl::Now());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(id.status().message().find("mallory"), absl::string_view::npos) << id.status();
}

TEST_F(CertsTest, ExpiredAndNotYetValidCertificatesAreRefused) {
  auto v = CertVerifier::Create(ca_->cert_pem);
  ASSERT_TRUE(v.ok());
  IssueOptions o;
  o.role = Role::kAdmin;
  o.name = "old";
  o.not_before = absl::Now() - absl::Hours(2);
  o.validity = absl::Hours(1);
  auto old = IssueCert(*ca_, o);
  ASSERT_TRUE(old.ok());
  auto id = v->Verify(old->cert_pem, absl::Now());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(id.status().message().find("expired"), absl::string_view::npos) << id.status();
  // One valid only from an hour from now: refused now, accepted then.
  o.name = "future";
  o.not_before = absl::Now() + absl::Hours(1);
  auto future = IssueCert(*ca_, o);
  ASSERT_TRUE(future.ok());
  auto early = v->Verify(future->cert_pem, absl::Now());
  EXPECT_EQ(early.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(early.status().message().find("not yet valid"), absl::string_view::npos)
      << early.status();
  EXPECT_TRUE(v->Verify(future->cert_pem, absl::Now() + absl::Minutes(90)).ok());
}

TEST_F(CertsTest, TheCaItselfIsNoIdentity) {
  auto v = CertVerifier::Create(ca_->cert_pem);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->Verify(ca_->cert_pem, absl::Now()).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(v->Verify("not a certificate", absl::Now()).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(CertsTest, IssuingChecksNamesHostsAndTheCaKey) {
  IssueOptions o;
  o.role = Role::kAdmin;
  o.name = "bad name";
  EXPECT_EQ(IssueCert(*ca_, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.name = std::string(65, 'a');
  EXPECT_EQ(IssueCert(*ca_, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.name = "pool-*";  // pools are for workers only
  EXPECT_EQ(IssueCert(*ca_, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.role = Role::kWorker;
  EXPECT_TRUE(IssueCert(*ca_, o).ok());
  o.role = Role::kCoordinator;
  o.name = "coordinator";
  o.hosts = {"10.0.0.1", "::1", "yoke.example", "bad host!"};
  EXPECT_EQ(IssueCert(*ca_, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.hosts.pop_back();
  EXPECT_TRUE(IssueCert(*ca_, o).ok());
  KeyCert mismatched{ca_->cert_pem, other_ca_->key_pem};
  auto r = IssueCert(mismatched, o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("does not match"), absl::string_view::npos) << r.status();
}

TEST_F(CertsTest, PoolWorkersRegisterUnderTheirHostname) {
  EXPECT_EQ(*WorkerIdFor("w-1", "node-a"), "w-1");
  EXPECT_EQ(*WorkerIdFor("k8s-*", "yoke-worker-x7z"), "k8s-yoke-worker-x7z");
  EXPECT_EQ(WorkerIdFor("k8s-*", "bad/host").status().code(), absl::StatusCode::kInvalidArgument);
  auto v = CertVerifier::Create(ca_->cert_pem);
  auto id = v->Verify(Issue(Role::kWorker, "k8s-*").cert_pem, absl::Now());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->name, "k8s-*");
}

TEST_F(CertsTest, DirectoriesKeepKeysPrivateAndNeverOverwriteACa) {
  const std::string dir = ::testing::TempDir() + "/certs_test_dirs";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(WriteCaDir(dir + "/ca", *ca_).ok());
  struct stat st;
  ASSERT_EQ(::stat((dir + "/ca/ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto again = WriteCaDir(dir + "/ca", *other_ca_);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  auto read = ReadCaDir(dir + "/ca");
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->key_pem, ca_->key_pem);

  IssueOptions o;
  o.role = Role::kWorker;
  o.name = "w-7";
  ASSERT_TRUE(IssueCredentialsDir(*read, o, dir + "/w-7").ok());
  ASSERT_EQ(::stat((dir + "/w-7/tls.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto creds = ReadCredentialsDir(dir + "/w-7", /*need_leaf=*/true);
  ASSERT_TRUE(creds.ok()) << creds.status();
  EXPECT_EQ(creds->ca_pem, ca_->cert_pem);
  auto v = CertVerifier::Create(creds->ca_pem);
  EXPECT_EQ(v->Verify(creds->leaf.cert_pem, absl::Now())->name, "w-7");

  // A key others can read is refused, naming it.
  ::chmod((dir + "/w-7/tls.key").c_str(), 0644);
  auto open = ReadCredentialsDir(dir + "/w-7", true);
  EXPECT_EQ(open.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(open.status().message().find("tls.key"), absl::string_view::npos) << open.status();
  // Only the CA is needed without a leaf; a missing file is named.
  std::filesystem::remove(dir + "/w-7/tls.key");
  std::filesystem::remove(dir + "/w-7/tls.crt");
  EXPECT_TRUE(ReadCredentialsDir(dir + "/w-7", false).ok());
  auto missing = ReadCredentialsDir(dir + "/w-7", true);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("tls.crt"), absl::string_view::npos);

  // A CA "file" that is a FIFO (or /dev/zero) is refused before a byte is
  // read: nothing blocks or grows.
  std::filesystem::remove(dir + "/w-7/ca.crt");
  ASSERT_EQ(::mkfifo((dir + "/w-7/ca.crt").c_str(), 0600), 0);
  auto fifo = ReadCredentialsDir(dir + "/w-7", false);
  EXPECT_EQ(fifo.status().code(), absl::StatusCode::kInvalidArgument) << fifo.status();
  EXPECT_NE(fifo.status().message().find("ca.crt"), absl::string_view::npos) << fifo.status();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace yoke::common

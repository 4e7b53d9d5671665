#include "jobspec/job_spec_binary.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "common/testing/temp_dir.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "security/sha256.h"

namespace yoke::common {
namespace {

v1::JobSpec Spec(const std::string& name) {
  v1::JobSpec s;
  s.set_name(name);
  s.mutable_training()->set_epochs(3);
  s.mutable_training()->set_batch_size(64);
  s.mutable_model()->set_zoo("mlp");
  return s;
}

TEST(JobSpecBinaryTest, DigestIdentifiesTheSpec) {
  EXPECT_EQ(JobSpecDigest(Spec("a")), Sha256(SerializeJobSpec(Spec("a"))));
  EXPECT_EQ(JobSpecDigest(Spec("a")).size(), 32u);
  EXPECT_NE(JobSpecDigest(Spec("a")), JobSpecDigest(Spec("b")));
  v1::JobSpec reparsed;
  ASSERT_TRUE(reparsed.ParseFromString(SerializeJobSpec(Spec("a"))));
  EXPECT_EQ(JobSpecDigest(reparsed), JobSpecDigest(Spec("a")));
}

TEST(JobSpecBinaryTest, WrittenFileReadsBack) {
  const TempDir tmp("yoke_job_spec_binary");  // removed with its files at the end
  const std::string path = tmp.File("job.pb");
  ASSERT_TRUE(WriteJobSpecFile(path, Spec("round-trip")).ok());
  auto back = ReadJobSpecFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*back, Spec("round-trip")));
}

TEST(JobSpecBinaryTest, RefusesWhatIsNoSpecNamingTheFile) {
  const TempDir tmp("yoke_job_spec_binary");  // removed with its files at the end
  const std::string dir = tmp.path();
  const std::string path = dir + "/job.pb";
  ASSERT_TRUE(WriteJobSpecFile(path, Spec("x")).ok());
  const int64_t size = static_cast<int64_t>(SerializeJobSpec(Spec("x")).size());
  // Over the cap given: refused before it is read.
  auto big = ReadJobSpecFile(path, size - 1);
  ASSERT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find(path), std::string::npos) << big.status();
  EXPECT_TRUE(ReadJobSpecFile(path, size).ok());

  auto directory = ReadJobSpecFile(dir);
  ASSERT_EQ(directory.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(directory.status().message().find("not a regular file"), std::string::npos);

  auto missing = ReadJobSpecFile(dir + "/missing.pb");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();

  const std::string garbage = dir + "/garbage.pb";
  std::ofstream(garbage) << "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff";
  auto bad = ReadJobSpecFile(garbage);
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(garbage), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("not a serialized"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace yoke::common

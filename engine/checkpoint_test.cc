#include "engine/checkpoint.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

NamedTensors Sample() {
  Tensor a = Tensor::Empty({3, 5});
  for (int i = 0; i < 15; ++i) a.data<float>()[i] = 0.25f * i - 1.0f;
  Tensor b = Tensor::Empty({4}, DType::kI32);
  for (int i = 0; i < 4; ++i) b.data<int32_t>()[i] = 7 * i - 3;
  return {{"params", a}, {"labels", b}};
}

std::string ReadBytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void WriteBytes(const std::string& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

TEST(CheckpointTest, RoundTrip) {
  common::TempDir tmp("yoke_ckpt");  // removed with its files at the end
  const std::string dir = tmp.path();
  v1::CheckpointHeader h;
  h.set_step(42);
  h.set_epoch(2);
  h.set_step_in_epoch(17);
  h.set_seed(99);
  h.mutable_spec()->set_name("job");
  ASSERT_TRUE(WriteCheckpoint(dir + "/c.yoke", h, Sample()).ok());
  auto ck = ReadCheckpoint(dir + "/c.yoke");
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->header.step(), 42);
  EXPECT_EQ(ck->header.epoch(), 2);
  EXPECT_EQ(ck->header.step_in_epoch(), 17);
  EXPECT_EQ(ck->header.spec().name(), "job");
  const Tensor* a = ck->Find("params");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape(), (Shape{3, 5}));
  for (int i = 0; i < 15; ++i) EXPECT_EQ(a->data<float>()[i], 0.25f * i - 1.0f);
  const Tensor* b = ck->Find("labels");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype(), DType::kI32);
  EXPECT_EQ(b->data<int32_t>()[3], 18);
  EXPECT_EQ(ck->Find("nope"), nullptr);
  // No temporary file is left behind.
  EXPECT_NE(access((dir + "/c.yoke.tmp").c_str(), F_OK), 0);
}

TEST(CheckpointTest, RejectsCorruptFiles) {
  common::TempDir tmp("yoke_ckpt");  // removed with its files at the end
  const std::string dir = tmp.path();
  std::string p = dir + "/c.yoke";
  ASSERT_TRUE(WriteCheckpoint(p, {}, Sample()).ok());
  std::string good = ReadBytes(p);

  // Truncated at every length: always an error, never a crash.
  for (size_t n = 0; n < good.size(); n += 7) {
    WriteBytes(p, good.substr(0, n));
    EXPECT_FALSE(ReadCheckpoint(p).ok()) << "length " << n;
  }
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  WriteBytes(p, bad_magic);
  auto s = ReadCheckpoint(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("bad magic"), std::string::npos);

  std::string bad_version = good;
  bad_version[8] = 9;
  WriteBytes(p, bad_version);
  s = ReadCheckpoint(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("version 9"), std::string::npos);

  // Any single flipped byte in the body is caught by the checksum.
  for (size_t i = 16; i < good.size(); i += 5) {
    std::string flipped = good;
    flipped[i] ^= 0x5a;
    WriteBytes(p, flipped);
    EXPECT_FALSE(ReadCheckpoint(p).ok()) << "byte " << i;
  }
  EXPECT_EQ(ReadCheckpoint(dir + "/missing").status().code(), absl::StatusCode::kNotFound);
}

// Two records with one name: the file is refused by both readers (which
// record a reader took would decide what it restores), and the writer never
// makes such a file. The fuzzer found the readers disagreeing on one.
TEST(CheckpointTest, RefusesATensorNamedTwice) {
  common::TempDir tmp("yoke_ckpt");  // removed with its files at the end
  const std::string p = tmp.path() + "/c.yoke";
  NamedTensors twice = Sample();
  twice[1].first = twice[0].first;
  const absl::Status w = WriteCheckpoint(p, {}, twice);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.message().find("'params' is declared twice"), std::string::npos) << w;

  // The same file by hand: the writer's bytes with the second record renamed.
  ASSERT_TRUE(WriteCheckpoint(p, {}, Sample()).ok());
  const std::string good = ReadBytes(p);
  uint32_t hdr_len;
  std::memcpy(&hdr_len, good.data() + 12, 4);
  v1::CheckpointHeader h;
  ASSERT_TRUE(h.ParseFromArray(good.data() + 16, static_cast<int>(hdr_len)));
  h.mutable_tensors(1)->set_name("params");
  std::string hdr;
  ASSERT_TRUE(h.SerializeToString(&hdr));
  std::string bad = good.substr(0, 12);
  const uint32_t new_len = static_cast<uint32_t>(hdr.size());
  bad.append(reinterpret_cast<const char*>(&new_len), 4);
  bad += hdr;
  bad += good.substr(16 + hdr_len, good.size() - 16 - hdr_len - 4);
  const uint32_t crc =
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bad.data()), bad.size());
  bad.append(reinterpret_cast<const char*>(&crc), 4);
  WriteBytes(p, bad);
  const auto whole = ReadCheckpoint(p);
  ASSERT_FALSE(whole.ok());
  EXPECT_NE(whole.status().message().find("'params' appears twice"), std::string::npos)
      << whole.status();
  const auto streamed = ReadCheckpointSlices(p, {});
  ASSERT_FALSE(streamed.ok());
  EXPECT_NE(streamed.status().message().find("'params' appears twice"), std::string::npos)
      << streamed.status();
  // Renamed back, the same bytes read: the refusal is the name's alone.
  h.mutable_tensors(1)->set_name("labels");
  ASSERT_TRUE(h.SerializeToString(&hdr));
  ASSERT_EQ(hdr.size(), new_len);
  bad.replace(16, hdr.size(), hdr);
  const uint32_t crc2 =
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bad.data()), bad.size() - 4);
  std::memcpy(bad.data() + bad.size() - 4, &crc2, 4);
  WriteBytes(p, bad);
  EXPECT_TRUE(ReadCheckpoint(p).ok());
  EXPECT_TRUE(ReadCheckpointSlices(p, {}).ok());
}

TEST(CheckpointTest, LatestAndPrune) {
  common::TempDir tmp("yoke_ckpt");  // removed with its files at the end
  const std::string dir = tmp.path();
  EXPECT_EQ(LatestCheckpoint(dir).status().code(), absl::StatusCode::kNotFound);
  for (int64_t step : {5, 100, 20, 7}) {
    ASSERT_TRUE(WriteCheckpoint(CheckpointPath(dir, step), {}, Sample()).ok());
  }
  auto latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, CheckpointPath(dir, 100));
  ASSERT_TRUE(PruneCheckpoints(dir, 2).ok());
  EXPECT_NE(access(CheckpointPath(dir, 5).c_str(), F_OK), 0);
  EXPECT_NE(access(CheckpointPath(dir, 7).c_str(), F_OK), 0);
  EXPECT_EQ(access(CheckpointPath(dir, 20).c_str(), F_OK), 0);
  EXPECT_EQ(access(CheckpointPath(dir, 100).c_str(), F_OK), 0);
}

// A checkpoint appended in odd-sized pieces is the file WriteCheckpoint
// writes, and slices of it read back element for element.
TEST(CheckpointTest, WrittenInPiecesAndReadInSlices) {
  common::TempDir tmp("yoke_ckpt");
  const std::string whole = tmp.path() + "/whole.yoke", pieces = tmp.path() + "/pieces.yoke";
  v1::CheckpointHeader h;
  h.set_step(7);
  const NamedTensors t = Sample();
  ASSERT_TRUE(WriteCheckpoint(whole, h, t).ok());
  {
    auto w = CheckpointWriter::Open(
        pieces, h, {{"params", DType::kF32, {3, 5}}, {"labels", DType::kI32, {4}}});
    ASSERT_TRUE(w.ok()) << w.status();
    const char* a = static_cast<const char*>(t[0].second.raw());
    const char* b = static_cast<const char*>(t[1].second.raw());
    // 60 + 16 bytes, split across the tensors' boundary.
    ASSERT_TRUE((*w)->Append(a, 13).ok());
    ASSERT_TRUE((*w)->Append(a + 13, 47).ok());
    ASSERT_TRUE((*w)->Append(b, 16).ok());
    EXPECT_EQ((*w)->Append(b, 1).code(), absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE((*w)->Finish().ok());
  }
  EXPECT_EQ(ReadBytes(pieces), ReadBytes(whole));

  Tensor mid = Tensor::Empty({6}), last = Tensor::Empty({2}, DType::kI32);
  auto hr = ReadCheckpointSlices(pieces, {{"params", 4, mid}, {"labels", 2, last}});
  ASSERT_TRUE(hr.ok()) << hr.status();
  EXPECT_EQ(hr->step(), 7);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(mid.data<float>()[i], t[0].second.data<float>()[4 + i]);
  EXPECT_EQ(last.data<int32_t>()[0], t[1].second.data<int32_t>()[2]);
  EXPECT_EQ(last.data<int32_t>()[1], t[1].second.data<int32_t>()[3]);

  // Past the tensor's end, another dtype, an unknown name: refused, named.
  auto past = ReadCheckpointSlices(pieces, {{"params", 10, mid}});
  EXPECT_EQ(past.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(past.status().message().find("elements 10 to 16"), std::string::npos) << past.status();
  EXPECT_FALSE(ReadCheckpointSlices(pieces, {{"labels", 0, mid}}).ok());
  EXPECT_NE(ReadCheckpointSlices(pieces, {{"momentum", 0, mid}})
                .status()
                .message()
                .find("no 'momentum' tensor"),
            std::string::npos);

  // Every flipped byte after the fixed part and every truncation is an
  // error, never a crash.
  const std::string good = ReadBytes(pieces);
  for (size_t i = 16; i < good.size(); i += 3) {
    std::string flipped = good;
    flipped[i] ^= 0x5a;
    WriteBytes(pieces, flipped);
    EXPECT_FALSE(ReadCheckpointSlices(pieces, {{"params", 0, mid}}).ok()) << "byte " << i;
  }
  for (size_t n = 0; n < good.size(); n += 5) {
    WriteBytes(pieces, good.substr(0, n));
    EXPECT_FALSE(ReadCheckpointSlices(pieces, {}).ok()) << "length " << n;
  }
}

// A writer that is not finished leaves neither the file nor its temporary.
TEST(CheckpointTest, AnUnfinishedWriterLeavesNothing) {
  common::TempDir tmp("yoke_ckpt");
  const std::string p = tmp.path() + "/c.yoke";
  {
    auto w = CheckpointWriter::Open(p, {}, {{"params", DType::kF32, {4}}});
    ASSERT_TRUE(w.ok());
    const float x[2] = {1, 2};
    ASSERT_TRUE((*w)->Append(x, sizeof(x)).ok());
    const absl::Status s = (*w)->Finish();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("only 8 of the header's 16 data bytes"), std::string::npos) << s;
  }
  {
    auto w = CheckpointWriter::Open(p, {}, {{"params", DType::kF32, {4}}});
    ASSERT_TRUE(w.ok());
  }
  EXPECT_NE(access(p.c_str(), F_OK), 0);
  EXPECT_NE(access((p + ".tmp").c_str(), F_OK), 0);
}

// The newest checkpoint that verifies: a newer one with a flipped data byte
// (which only the checksum catches) or a torn tail is passed over and named.
TEST(CheckpointTest, NewestValidPassesOverCorruptFiles) {
  common::TempDir tmp("yoke_ckpt");
  const std::string dir = tmp.path();
  for (int step : {10, 20, 30}) {
    v1::CheckpointHeader h;
    h.set_step(step);
    ASSERT_TRUE(WriteCheckpoint(CheckpointPath(dir, step), h, Sample()).ok());
  }
  std::string flipped = ReadBytes(CheckpointPath(dir, 30));
  flipped[flipped.size() - 10] ^= 0x01;  // inside the last tensor's bytes
  WriteBytes(CheckpointPath(dir, 30), flipped);
  const std::string torn = ReadBytes(CheckpointPath(dir, 20));
  WriteBytes(CheckpointPath(dir, 20), torn.substr(0, torn.size() - 3));
  std::vector<std::string> skipped;
  auto newest = NewestValidCheckpoint(dir, &skipped);
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(*newest, CheckpointPath(dir, 10));
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_NE(skipped[0].find(CheckpointPath(dir, 30) + ": "), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[0].find("checksum mismatch"), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[1].find(CheckpointPath(dir, 20) + ": "), std::string::npos) << skipped[1];
  WriteBytes(CheckpointPath(dir, 10), "YOKECKPT");
  EXPECT_EQ(NewestValidCheckpoint(dir).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace yoke::engine

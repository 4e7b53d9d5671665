#include "data/csv_reader.h"

#include "data/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::data {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

absl::StatusOr<std::unique_ptr<Dataset>> Parse(const std::string& text, const CsvOptions& o = {}) {
  TempDir dir;
  EXPECT_TRUE(testing::WriteText(dir.File("t.csv"), text));
  return ReadCsv(dir.File("t.csv"), o);
}

std::vector<float> Features(const Dataset& d, int64_t i) {
  std::vector<float> f(d.example_numel());
  d.ExampleAsFloat(i, f.data());
  return f;
}

TEST(CsvReaderTest, LabelLastWithHeaderAndCrlf) {
  CsvOptions o;
  o.header = true;
  auto ds = Parse("a,b,c,label\r\n1, 2.5 ,-3,2\r\n\r\n4e1,0,0.125,0\r\n", o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const Dataset& d = **ds;
  EXPECT_EQ(d.size(), 2);
  EXPECT_EQ(d.example_shape(), (std::vector<int64_t>{3}));
  EXPECT_EQ(d.num_classes(), 3);
  EXPECT_EQ(d.element_type(), ElementType::kF32);
  EXPECT_EQ(Features(d, 0), (std::vector<float>{1, 2.5f, -3}));
  EXPECT_EQ(Features(d, 1), (std::vector<float>{40, 0, 0.125f}));
  EXPECT_EQ(d.Label(0), 2);
  EXPECT_EQ(d.Label(1), 0);
}

TEST(CsvReaderTest, LabelFirstAndShape) {
  CsvOptions o;
  o.label_column = 0;
  o.shape = {2, 2, 1};
  auto ds = Parse("1,0.1,0.2,0.3,0.4\n0,1,2,3,4\n", o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->example_shape(), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(Features(**ds, 1), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ((*ds)->Label(0), 1);
  o.label_column = -2;  // second to last
  o.shape = {};
  ds = Parse("1,2,3\n", o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(Features(**ds, 0), (std::vector<float>{1, 3}));
  EXPECT_EQ((*ds)->Label(0), 2);
}

TEST(CsvReaderTest, Errors) {
  auto ds = Parse("1,2,0\n1,x,1\n");
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ds.status().message()),
              HasSubstr("line 2, column 2: the value is not a number (a cell of 1 bytes)"));

  ds = Parse("1,2,0\n1,2\n");
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("line 2 has 2 columns, expected 3"));

  ds = Parse("1,2,-1\n");
  EXPECT_THAT(std::string(ds.status().message()),
              HasSubstr("line 1, column 3: the label is negative; labels are integers"));
  ds = Parse("1,2,1.5\n");
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("the label is not a whole number"));
  // Past int64's range (found by the fuzzer: the check itself was undefined).
  ds = Parse("1,2,666666666666666666666666666666666\n");
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("the label is too large"));
  ds = Parse("1,nan,1\n");
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("the value is NaN or infinite"));
  ds = Parse("1,,1\n");
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("the value is empty"));
  // No bytes of the file appear in a message.
  ds = Parse("1,hunter2:sec,1\n");
  EXPECT_THAT(std::string(ds.status().message()), ::testing::Not(HasSubstr("hunter2")));
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("a cell of 11 bytes"));

  CsvOptions o;
  o.header = true;
  ds = Parse("a,b,label\n", o);
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("no data rows"));
  ds = Parse("");
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  ds = Parse("5\n6\n");
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("at least one feature"));

  o = {};
  o.label_column = 3;
  ds = Parse("1,2,3\n", o);
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("label_column 3 is out of range"));
  o = {};
  o.shape = {2, 2};
  ds = Parse("1,2,3,0\n", o);
  EXPECT_THAT(std::string(ds.status().message()),
              HasSubstr("shape (2, 2) must hold exactly the 3 features"));

  TempDir dir;
  EXPECT_EQ(ReadCsv(dir.File("missing.csv"), {}).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace yoke::data

#include "common/flags.h"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/file_contents.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::common {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// The flags of a trainer-like program: a job file, repeated --set, strings,
// ints and a switch.
struct Vars {
  std::vector<std::string> sets;
  std::string output = "text";
  std::string resume;
  int rank = 0;
  bool watch = false;
};

FlagParser MakeParser(Vars* v) {
  FlagParser p("prog", "usage: prog JOB.yaml [--set path=value ...]\n");
  p.Strings("--set", &v->sets)
      .String("--output,-o", &v->output)
      .String("--resume", &v->resume)
      .Int("--rank", &v->rank, 0)
      .Bool("--watch", &v->watch);
  return p;
}

TEST(FlagParserTest, RepeatedFlagsAccumulateInOrderInBothForms) {
  Vars v;
  auto r = MakeParser(&v).Parse({"--set", "a=1", "--set=b=2", "--set", "c=3"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(v.sets, ElementsAre("a=1", "b=2", "c=3"));
}

TEST(FlagParserTest, EqualsAndSeparateValueFormsAndAliases) {
  Vars v;
  auto r = MakeParser(&v).Parse({"--output=json", "--resume", "ck.bin", "--rank=3"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(v.output, "json");
  EXPECT_EQ(v.resume, "ck.bin");
  EXPECT_EQ(v.rank, 3);
  // A later occurrence of a single-valued flag replaces it; -o is --output.
  r = MakeParser(&v).Parse({"--output", "json", "-o", "events"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(v.output, "events");
  // An '=' inside the value stays in the value.
  r = MakeParser(&v).Parse({"--resume=a=b"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(v.resume, "a=b");
}

TEST(FlagParserTest, PositionalsComeBackInOrderAroundFlags) {
  Vars v;
  auto r = MakeParser(&v).Parse({"one", "--set", "x=1", "-", "two", "--", "--set", "-o"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->help);
  EXPECT_THAT(r->positional, ElementsAre("one", "-", "two", "--set", "-o"));
  EXPECT_THAT(v.sets, ElementsAre("x=1"));
}

TEST(FlagParserTest, UnknownFlagIsAnErrorNamingIt) {
  Vars v;
  auto r = MakeParser(&v).Parse({"job.yaml", "--bogus=1"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "unknown flag '--bogus'");
  r = MakeParser(&v).Parse({"-x"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "unknown flag '-x'");
}

TEST(FlagParserTest, MissingValueIsAnError) {
  Vars v;
  auto r = MakeParser(&v).Parse({"job.yaml", "--set"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--set needs a value");
  // A value is taken whatever it looks like.
  r = MakeParser(&v).Parse({"--resume", "--set"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(v.resume, "--set");
}

TEST(FlagParserTest, IntAndBoolValuesAreChecked) {
  Vars v;
  auto r = MakeParser(&v).Parse({"--rank", "-1"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--rank: expected an integer >= 0, got '-1'");
  r = MakeParser(&v).Parse({"--rank=two"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--rank: expected an integer >= 0, got 'two'");
  EXPECT_EQ(v.rank, 0);  // untouched by a bad value

  int port = 7;
  FlagParser p("prog", "");
  p.Int("--port", &port, 0, 65535);
  r = p.Parse({"--port", "70000"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--port: expected an integer in [0, 65535], got '70000'");
  ASSERT_TRUE(p.Parse({"--port", "8080"}).ok());
  EXPECT_EQ(port, 8080);

  // A switch takes no separate value; "=false" turns it off.
  r = MakeParser(&v).Parse({"--watch", "job.yaml"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(v.watch);
  EXPECT_THAT(r->positional, ElementsAre("job.yaml"));
  ASSERT_TRUE(MakeParser(&v).Parse({"--watch=false"}).ok());
  EXPECT_FALSE(v.watch);
  r = MakeParser(&v).Parse({"--watch=maybe"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--watch: expected true or false, got 'maybe'");
}

TEST(FlagParserTest, DurationValuesAreCheckedAgainstTheMinimum) {
  absl::Duration d = absl::Seconds(7);
  FlagParser p("prog", "");
  p.Duration("--grace", &d, absl::Milliseconds(1), "a duration > 0 such as 10s");
  ASSERT_TRUE(p.Parse({"--grace=2s"}).ok());
  EXPECT_EQ(d, absl::Seconds(2));
  ASSERT_TRUE(p.Parse({"--grace", "1500"}).ok());
  EXPECT_EQ(d, absl::Milliseconds(1500));
  auto r = p.Parse({"--grace", "0"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--grace: expected a duration > 0 such as 10s, got '0'");
  r = p.Parse({"--grace", "soon"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--grace: expected a duration > 0 such as 10s, got 'soon'");
  EXPECT_EQ(d, absl::Milliseconds(1500));  // untouched by a bad value
}

TEST(FlagParserTest, ByteSizesAreCheckedAgainstTheMinimum) {
  int64_t bytes = 7;
  FlagParser p("prog", "");
  p.Bytes("--memory", &bytes, int64_t{1} << 20, "a size of at least 1MiB such as 8GiB");
  ASSERT_TRUE(p.Parse({"--memory=2GiB"}).ok());
  EXPECT_EQ(bytes, int64_t{2} << 30);
  for (const char* bad : {"1KiB", "0", "lots", "-1GiB", "8 parsecs", ""}) {
    auto r = p.Parse({"--memory", bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message(), absl::StrCat("--memory: expected a size of at least 1MiB such "
                                                 "as 8GiB, got '",
                                                 bad, "'"));
  }
  EXPECT_EQ(bytes, int64_t{2} << 30);  // untouched by a bad value
}

TEST(FlagParserTest, CustomSetterErrorsComeBackAsGiven) {
  std::string mode;
  FlagParser p("prog", "");
  p.Custom("--mode", [&](const std::string& v) {
    if (v != "a" && v != "b") return absl::InvalidArgumentError("--mode: expected a or b");
    mode = v;
    return absl::OkStatus();
  });
  ASSERT_TRUE(p.Parse({"--mode=b"}).ok());
  EXPECT_EQ(mode, "b");
  auto r = p.Parse({"--mode", "c"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--mode: expected a or b");
}

TEST(FlagParserTest, TrackTellsAGivenFlagFromItsDefault) {
  int replicas = 0;
  bool replicas_given = false, verbose = false, verbose_given = false;
  FlagParser p("prog", "");
  p.Int("--replicas", &replicas, 0, 8).Track(&replicas_given).Bool("--verbose", &verbose);
  p.Track(&verbose_given);
  ASSERT_TRUE(p.Parse({"--verbose=false"}).ok());
  EXPECT_FALSE(replicas_given);
  EXPECT_TRUE(verbose_given);
  // A bad value is not "given"; the default value given explicitly is.
  ASSERT_FALSE(p.Parse({"--replicas", "9"}).ok());
  EXPECT_FALSE(replicas_given);
  ASSERT_TRUE(p.Parse({"--replicas=0"}).ok());
  EXPECT_TRUE(replicas_given);
  EXPECT_EQ(replicas, 0);
}

TEST(FlagParserTest, HelpStopsParsing) {
  Vars v;
  auto r = MakeParser(&v).Parse({"--set", "a=1", "--help", "--bogus"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->help);
  r = MakeParser(&v).Parse({"-h"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->help);
}

// Runs ParseOrExitCode, capturing what it prints.
struct Outcome {
  std::optional<int> code;
  std::string out, err;
  std::vector<std::string> positional;
};

Outcome RunParse(const std::vector<std::string>& args) {
  Vars v;
  FlagParser p = MakeParser(&v);
  Outcome o;
  FILE* out = std::tmpfile();
  FILE* err = std::tmpfile();
  o.code = p.ParseOrExitCode(args, &o.positional, out, err);
  o.out = FileContents(out);
  o.err = FileContents(err);
  std::fclose(out);
  std::fclose(err);
  return o;
}

TEST(FlagParserTest, ParseOrExitCodeReportsHelpAndErrorsTheSameWay) {
  Outcome o = RunParse({"--help"});
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.out, "usage: prog JOB.yaml [--set path=value ...]\n");
  EXPECT_THAT(o.err, IsEmpty());

  o = RunParse({"--nope"});
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.out, IsEmpty());
  EXPECT_EQ(o.err, "prog: unknown flag '--nope'\nusage: prog JOB.yaml [--set path=value ...]\n");

  o = RunParse({"a.yaml", "--set", "x=1", "b"});
  EXPECT_EQ(o.code, std::nullopt);
  EXPECT_THAT(o.positional, ElementsAre("a.yaml", "b"));
  EXPECT_THAT(o.out, IsEmpty());
  EXPECT_THAT(o.err, IsEmpty());
}

TEST(ParseDurationFlagTest, UnitsOrPlainMilliseconds) {
  absl::Duration d;
  ASSERT_TRUE(ParseDurationFlag("10s", &d));
  EXPECT_EQ(d, absl::Seconds(10));
  ASSERT_TRUE(ParseDurationFlag("250ms", &d));
  EXPECT_EQ(d, absl::Milliseconds(250));
  ASSERT_TRUE(ParseDurationFlag("1500", &d));
  EXPECT_EQ(d, absl::Milliseconds(1500));
  ASSERT_TRUE(ParseDurationFlag("0", &d));
  EXPECT_EQ(d, absl::ZeroDuration());
  EXPECT_FALSE(ParseDurationFlag("-5", &d));
  EXPECT_FALSE(ParseDurationFlag("-1s", &d));
  EXPECT_FALSE(ParseDurationFlag("soon", &d));
  EXPECT_FALSE(ParseDurationFlag("", &d));
}

TEST(ParseByteSizeFlagTest, PlainBytesOrBinaryAndDecimalUnits) {
  int64_t b = -1;
  const std::vector<std::pair<std::string, int64_t>> good = {
      {"1073741824", int64_t{1} << 30},
      {"0", 0},
      {"512MiB", int64_t{512} << 20},
      {"512m", int64_t{512} << 20},
      {"8 GiB", int64_t{8} << 30},
      {"8G", int64_t{8} << 30},
      {"1.5GiB", int64_t{3} << 29},
      {"2TiB", int64_t{2} << 40},
      {"64KiB", int64_t{64} << 10},
      {"3GB", 3000000000},
      {"250mb", 250000000},
      {"100B", 100},
      {"8589934592b", int64_t{8} << 30},
      {"8388607TiB", int64_t{8388607} << 40},
  };
  for (const auto& [text, want] : good) {
    ASSERT_TRUE(ParseByteSizeFlag(text, &b)) << text;
    EXPECT_EQ(b, want) << text;
  }
  for (const char* bad :
       {"", "GiB", "-1", "-1GiB", "1.5", "0.3KiB", "1..2G", ".5G", "5.G", "10 GiBs", "8Gi", "1e9",
        "9223372036854775808", "8388608TiB", "99999999999999999999"}) {
    EXPECT_FALSE(ParseByteSizeFlag(bad, &b)) << bad;
  }
}

TEST(ArgsOfTest, SkipsTheProgramName) {
  char prog[] = "prog", a[] = "--x", b[] = "y";
  char* argv[] = {prog, a, b, nullptr};
  EXPECT_THAT(ArgsOf(3, argv), ElementsAre("--x", "y"));
  EXPECT_THAT(ArgsOf(1, argv), IsEmpty());
}

}  // namespace
}  // namespace yoke::common

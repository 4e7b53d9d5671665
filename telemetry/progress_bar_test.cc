#include "telemetry/progress_bar.h"

#include <chrono>
#include <cstdio>
#include <limits>
#include <string>

#include "common/testing/file_contents.h"
#include "gtest/gtest.h"

namespace yoke::common {
namespace {

TEST(FormatDurationTest, MinutesSecondsAndHours) {
  EXPECT_EQ(FormatDuration(0), "0:00");
  EXPECT_EQ(FormatDuration(65), "1:05");
  EXPECT_EQ(FormatDuration(64.6), "1:05");  // rounded
  EXPECT_EQ(FormatDuration(3599), "59:59");
  EXPECT_EQ(FormatDuration(3723), "1:02:03");
  EXPECT_EQ(FormatDuration(-1), "?");
  EXPECT_EQ(FormatDuration(std::numeric_limits<double>::infinity()), "?");
  EXPECT_EQ(FormatDuration(std::numeric_limits<double>::quiet_NaN()), "?");
}

v1::StepProgress Progress(int64_t step_in_epoch, int64_t steps_per_epoch) {
  v1::StepProgress p;
  p.set_epoch(1);
  p.set_epochs(5);
  p.set_step_in_epoch(step_in_epoch);
  p.set_steps_per_epoch(steps_per_epoch);
  p.set_loss(0.43214);
  p.set_samples_per_second(1234.4);
  p.set_eta_seconds(65);
  return p;
}

TEST(ProgressBarTextTest, FillsInProportionToTheEpoch) {
  EXPECT_EQ(ProgressBarText(Progress(250, 1000)),
            "epoch 2/5 [######..................] 250/1000  loss 0.4321  1234 samples/s  ETA 1:05");
  EXPECT_EQ(ProgressBarText(Progress(1000, 1000)),
            "epoch 2/5 [########################] 1000/1000  loss 0.4321  1234 samples/s  "
            "ETA 1:05");
  // Out-of-range counts never overflow the bar.
  EXPECT_EQ(ProgressBarText(Progress(1500, 1000)).substr(10, 26), "[########################]");
  EXPECT_EQ(ProgressBarText(Progress(3, 0)).substr(10, 26), "[........................]");
}

TEST(RedrawnLineTest, RedrawsInPlaceAtMostOncePerInterval) {
  FILE* f = std::tmpfile();
  RedrawnLine line(f, std::chrono::hours(1));
  line.Clear();  // nothing drawn yet: nothing to erase
  EXPECT_TRUE(line.Draw("one"));
  EXPECT_FALSE(line.Draw("two"));  // too soon
  EXPECT_TRUE(line.Draw("three", /*force=*/true));
  line.Clear();
  line.Clear();  // erased already
  EXPECT_EQ(FileContents(f), "\r\033[Kone\r\033[Kthree\r\033[K");
  std::fclose(f);

  f = std::tmpfile();
  RedrawnLine every(f, std::chrono::milliseconds(0));
  EXPECT_TRUE(every.Draw("a"));
  EXPECT_TRUE(every.Draw("b"));
  EXPECT_EQ(FileContents(f), "\r\033[Ka\r\033[Kb");
  std::fclose(f);
}

}  // namespace
}  // namespace yoke::common

// telemetry/epoch_history.h: a job's epoch history merged in order and
// kept bounded, as the coordinator and the trainer keep theirs.
#include "telemetry/epoch_history.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace yoke::common {
namespace {

TEST(MergeEpochsTest, AnEpochReportedAgainReplacesItsEntryInPlace) {
  google::protobuf::RepeatedPtrField<v1::EpochResult> history;
  for (int e : {1, 2}) {
    v1::EpochResult* r = history.Add();
    r->set_epoch(e);
    r->set_train_loss(e);
  }
  google::protobuf::RepeatedPtrField<v1::EpochResult> report;
  report.Add()->set_epoch(2);
  report.Mutable(0)->set_train_loss(0.5);
  report.Add()->set_epoch(3);

  MergeEpochs(report, 100, &history);
  ASSERT_EQ(history.size(), 3);
  EXPECT_EQ(history.Get(0).epoch(), 1);
  EXPECT_EQ(history.Get(0).train_loss(), 1);
  EXPECT_EQ(history.Get(1).epoch(), 2);
  EXPECT_EQ(history.Get(1).train_loss(), 0.5);
  EXPECT_EQ(history.Get(2).epoch(), 3);
}

std::vector<int> Epochs(const google::protobuf::RepeatedPtrField<v1::EpochResult>& history) {
  std::vector<int> out;
  for (const v1::EpochResult& e : history) out.push_back(e.epoch());
  return out;
}

TEST(MergeEpochsTest, AnEpochOutOfOrderGoesWhereItsNumberBelongs) {
  google::protobuf::RepeatedPtrField<v1::EpochResult> history, report;
  for (int e : {5, 2, 7, 1, 2}) report.Add()->set_epoch(e);
  report.Mutable(4)->set_train_loss(0.25);
  MergeEpochs(report, 100, &history);
  EXPECT_EQ(Epochs(history), (std::vector<int>{1, 2, 5, 7}));
  EXPECT_EQ(history.Get(1).train_loss(), 0.25);  // the later report of epoch 2
}

// A job of many short epochs (CI's soak: an endless job of 8-step epochs
// ran thousands of them a second) reports them a few hundred at a time.
// The history stays bounded, in order, and keeps the newest epoch and the
// first, spread over the whole run.
TEST(MergeEpochsTest, AHistoryOfManyEpochsStaysBoundedAndSpreadOut) {
  google::protobuf::RepeatedPtrField<v1::EpochResult> history;
  constexpr int kMax = 64;
  int epoch = 0;
  for (int report_size : {1, 300, 7, 1000, 64, 5000, 3}) {
    google::protobuf::RepeatedPtrField<v1::EpochResult> report;
    for (int i = 0; i < report_size; ++i) report.Add()->set_epoch(++epoch);
    MergeEpochs(report, kMax, &history);
    ASSERT_LE(history.size(), kMax);
    ASSERT_GE(history.size(), std::min(epoch, kMax / 4));  // thinned no further than needed
    EXPECT_EQ(history.Get(0).epoch(), 1);
    EXPECT_EQ(history.Get(history.size() - 1).epoch(), epoch);
    for (int i = 1; i < history.size(); ++i) {
      ASSERT_LT(history.Get(i - 1).epoch(), history.Get(i).epoch());
    }
  }
  // Spread out: no gap between kept epochs is as wide as 4/kMax of the run
  // (the thinning's spacing is a power of two below that).
  for (int i = 1; i < history.size(); ++i) {
    EXPECT_LT(history.Get(i).epoch() - history.Get(i - 1).epoch(), 4.0 * epoch / kMax)
        << "between entries " << i - 1 << " and " << i;
  }
}

}  // namespace
}  // namespace yoke::common

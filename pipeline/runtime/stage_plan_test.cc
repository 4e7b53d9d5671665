// PlanStages: the balanced split is the best one over the legal cuts (checked
// against every 2- and 3-stage split of ResNet-20), named boundaries land
// where they are asked, and every wrong name is refused, naming it.
#include "pipeline/runtime/stage_plan.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::pipeline {
namespace {

using engine::Model;
using testing::HasSubstr;

Model::Cuts Resnet20Cuts() {
  v1::ModelSpec m;
  m.set_zoo("resnet20");
  m.set_width(8);
  auto cuts = Model::PipelineCuts(m, {16, 16, 3}, 10);
  EXPECT_TRUE(cuts.ok()) << cuts.status();
  return cuts.ok() ? *cuts : Model::Cuts();
}

// The costliest stage of `starts`, as PlanStages weighs layers.
int64_t Largest(const Model::Cuts& c, const std::vector<int>& starts) {
  int64_t worst = 0;
  for (size_t s = 0; s < starts.size(); ++s) {
    const int end = s + 1 < starts.size() ? starts[s + 1] : c.layers;
    int64_t cost = 0;
    for (int l = starts[s]; l < end; ++l) cost += c.macs[l] + 1;
    worst = std::max(worst, cost);
  }
  return worst;
}

TEST(StagePlanTest, BalancedIsTheBestSplitOverTheLegalCuts) {
  const Model::Cuts c = Resnet20Cuts();
  ASSERT_GE(c.cuts.size(), 3u);
  for (int stages : {2, 3}) {
    auto plan = PlanStages(c, stages, {}, "distribution.pipeline");
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->starts.size(), static_cast<size_t>(stages));
    EXPECT_EQ(plan->starts[0], 0);
    for (int s = 1; s < stages; ++s) {
      EXPECT_TRUE(std::binary_search(c.cuts.begin(), c.cuts.end(), plan->starts[s]))
          << "stage " << s << " starts at layer " << plan->starts[s] << ", not a legal cut";
    }
    // Every split over the legal cuts is at least as costly.
    int64_t best = INT64_MAX;
    for (size_t a = 0; a < c.cuts.size(); ++a) {
      if (stages == 2) {
        best = std::min(best, Largest(c, {0, c.cuts[a]}));
        continue;
      }
      for (size_t b = a + 1; b < c.cuts.size(); ++b) {
        best = std::min(best, Largest(c, {0, c.cuts[a], c.cuts[b]}));
      }
    }
    EXPECT_EQ(Largest(c, plan->starts), best) << stages << " stages";
    // The stages' MACs add up to the model's, and each but the last sends
    // its last layer's output on.
    int64_t total = 0, planned = 0;
    for (int64_t m : c.macs) total += m;
    for (int64_t m : plan->macs) planned += m;
    EXPECT_EQ(planned, total);
    EXPECT_EQ(plan->sends[0], c.output_elements[plan->end(0) - 1]);
    EXPECT_EQ(plan->sends.back(), 0);
  }
}

TEST(StagePlanTest, NamedBoundariesStartTheirStages) {
  const Model::Cuts c = Resnet20Cuts();
  const int b1 = c.cuts[1], b2 = c.cuts[c.cuts.size() - 2];
  auto plan = PlanStages(c, 3, {c.names[b1], c.names[b2]}, "distribution.pipeline.boundaries");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->starts, (std::vector<int>{0, b1, b2}));
  EXPECT_EQ(plan->end(2), c.layers);
}

TEST(StagePlanTest, WrongBoundariesAreRefusedByName) {
  const Model::Cuts c = Resnet20Cuts();
  const std::string p = "distribution.pipeline.boundaries";
  // A layer inside a residual block (the one after a legal cut's first).
  int inside = -1;
  for (int l = 1; l < c.layers; ++l) {
    if (!std::binary_search(c.cuts.begin(), c.cuts.end(), l)) {
      inside = l;
      break;
    }
  }
  ASSERT_GE(inside, 0);
  EXPECT_THAT(PlanStages(c, 2, {c.names[inside]}, p).status().message(),
              HasSubstr(p + "[0]: the model cannot be cut before '" + c.names[inside] + "'"));
  EXPECT_THAT(PlanStages(c, 2, {"no_such_layer"}, p).status().message(),
              HasSubstr(p + "[0]: the model has no layer 'no_such_layer'"));
  EXPECT_THAT(PlanStages(c, 3, {c.names[c.cuts[2]], c.names[c.cuts[1]]}, p).status().message(),
              HasSubstr(p + "[1]: '" + c.names[c.cuts[1]] + "'"));
  EXPECT_THAT(PlanStages(c, 3, {c.names[c.cuts[1]]}, p).status().message(),
              HasSubstr("2 names for 3 stages, got 1"));
  const int most = static_cast<int>(c.cuts.size()) + 1;
  EXPECT_THAT(PlanStages(c, most + 1, {}, "distribution.pipeline").status().message(),
              HasSubstr("can be cut into at most " + std::to_string(most) + " stages"));
  EXPECT_TRUE(PlanStages(c, most, {}, "distribution.pipeline").ok());
}

}  // namespace
}  // namespace yoke::pipeline

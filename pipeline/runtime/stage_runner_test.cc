// A pipelined step equals one rank accumulating the same micro-batches: the
// stages run as threads over a LocalExchange, and every parameter gradient,
// batch-norm running statistic and (after SGD steps) parameter must equal
// the whole model's, bit for bit. MLP and ResNet-20, 1F1B and GPipe, fewer
// micro-batches than stages, an uneven last micro-batch and an uneven split.
#include "pipeline/runtime/stage_runner.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/store.h"
#include "collective/testing/shm_segments.h"
#include "engine/losses/loss.h"
#include "engine/model.h"
#include "engine/testing/random.h"
#include "gtest/gtest.h"
#include "pipeline/runtime/gloo_transport.h"
#include "pipeline/runtime/shm_transport.h"
#include "pipeline/runtime/stage_plan.h"
#include "pipeline/split.h"

namespace yoke::pipeline {
namespace {

using engine::DType;
using engine::Model;
using engine::Shape;
using engine::Tensor;

constexpr uint64_t kSeed = 17;

constexpr float kLr = 0.05f;

struct Case {
  std::string name;
  v1::ModelSpec spec;
  Shape input;
  int classes = 10;
  int stages = 2;
  std::vector<int> starts;  // empty: balanced over the legal cuts
};

v1::ModelSpec Zoo(const std::string& zoo, int width = 0) {
  v1::ModelSpec m;
  m.set_zoo(zoo);
  if (width > 0) m.set_width(width);
  return m;
}

// Named values: every parameter's gradient and value, and every state entry.
using Values = std::map<std::string, std::vector<float>>;

void Collect(const engine::ParamSet& ps, Values* out) {
  for (size_t i = 0; i < ps.entries().size(); ++i) {
    const auto& e = ps.entries()[i];
    const Tensor g = ps.grad(static_cast<int>(i)), v = ps.value(static_cast<int>(i));
    (*out)["grad " + e.name].assign(g.data<float>(), g.data<float>() + g.numel());
    (*out)["value " + e.name].assign(v.data<float>(), v.data<float>() + v.numel());
  }
  for (size_t i = 0; i < ps.state_entries().size(); ++i) {
    const Tensor s = ps.state(static_cast<int>(i));
    (*out)["state " + ps.state_entries()[i].name].assign(s.data<float>(),
                                                         s.data<float>() + s.numel());
  }
}

// Plain SGD, the same arithmetic on both sides.
void Sgd(engine::ParamSet& ps) {
  float* w = ps.flat_values().data<float>();
  const float* g = ps.flat_grads().data<float>();
  for (int64_t i = 0; i < ps.flat_values().numel(); ++i) w[i] -= kLr * g[i];
}

struct Data {
  Tensor x, y;
};

Data MakeBatch(const Case& c, int64_t n, uint64_t stream) {
  Shape s = c.input;
  s.insert(s.begin(), n);
  Data d{Tensor::Empty(s), Tensor::Empty({n}, DType::kI32)};
  engine::testing::FillUniform(d.x, kSeed, stream);
  for (int64_t i = 0; i < n; ++i)
    d.y.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + stream) % c.classes);
  return d;
}

engine::LayerContext Ctx(int64_t step) {
  engine::LayerContext ctx;
  ctx.training = true;
  ctx.seed = kSeed;
  ctx.step = step;
  return ctx;
}

// One rank: the trainer's accumulation over MicroBatchSizes' micro-batches.
Values RunOneRank(const Case& c, const std::vector<int64_t>& batches, int micro) {
  auto model_or = Model::Create(c.spec, c.input, c.classes);
  EXPECT_TRUE(model_or.ok()) << model_or.status();
  if (!model_or.ok()) return {};
  Model& model = **model_or;
  model.params().Initialize(kSeed);
  auto loss = engine::CreateLoss("softmax_cross_entropy").value();
  Tensor sum = Tensor::Zeros(model.params().flat_grads().shape());
  for (size_t step = 0; step < batches.size(); ++step) {
    const Data d = MakeBatch(c, batches[step], step);
    const std::vector<int> sizes = MicroBatchSizes(static_cast<int>(batches[step]), micro).value();
    const int m = static_cast<int>(sizes.size());
    int64_t begin = 0;
    const int64_t per = engine::NumElements(c.input);
    for (int i = 0; i < m; ++i) {
      Shape s = c.input;
      s.insert(s.begin(), sizes[i]);
      const Tensor x = d.x.View(begin * per, s), y = d.y.View(begin, {sizes[i]});
      const Tensor logits = model.Forward(x, Ctx(static_cast<int64_t>(step) * micro + i)).value();
      Tensor dlogits = Tensor::Empty(logits.shape());
      EXPECT_TRUE(
          loss->Compute(logits, y, 1.0f / static_cast<float>(batches[step]), &dlogits).ok());
      EXPECT_TRUE(model.Backward(dlogits, Ctx(static_cast<int64_t>(step) * micro + i)).ok());
      float* g = model.params().flat_grads().data<float>();
      float* a = sum.data<float>();
      const int64_t total = sum.numel();
      if (m > 1 && i == 0) std::memcpy(a, g, total * sizeof(float));
      if (m > 1 && i > 0 && i < m - 1) {
        for (int64_t e = 0; e < total; ++e) a[e] += g[e];
      }
      if (m > 1 && i == m - 1) {
        for (int64_t e = 0; e < total; ++e) g[e] += a[e];
      }
      begin += sizes[i];
    }
    if (step + 1 < batches.size()) Sgd(model.params());
  }
  Values out;
  Collect(model.params(), &out);
  return out;
}

std::vector<int> Starts(const Case& c) {
  if (!c.starts.empty()) return c.starts;
  const Model::Cuts cuts = Model::PipelineCuts(c.spec, c.input, c.classes).value();
  return PlanStages(cuts, c.stages, {}, "test").value().starts;
}

struct PipelineRun {
  Values values;
  std::vector<int> peak_in_flight, planned_in_flight;
  std::vector<int64_t> peak_activation_bytes;
};

// How the stages' messages travel: in memory (LocalExchange), over Gloo's
// TCP pairs on loopback (GlooTransport, one context per stage), or through
// shared-memory rings (ShmTransport, every stage co-located).
enum class Wire { kLocal, kGloo, kShm };

// The stages as threads, their messages over `wire`. With kShm the rings
// are `ring_bytes` each, or 0: the least that holds one message of the
// largest micro-batch (so every further send waits for room).
PipelineRun RunPipelined(const Case& c, const std::vector<int64_t>& batches, int micro,
                         ScheduleKind kind, Wire wire = Wire::kLocal,
                         int64_t ring_bytes = 1 << 20) {
  const std::vector<int> starts = Starts(c);
  const int p = static_cast<int>(starts.size());
  const int layers = Model::PipelineCuts(c.spec, c.input, c.classes).value().layers;
  std::vector<std::unique_ptr<Model>> models;
  std::vector<std::unique_ptr<StageRunner>> runners;
  auto loss = engine::CreateLoss("softmax_cross_entropy").value();
  PipelineRun run;
  for (int s = 0; s < p; ++s) {
    const int end = s + 1 < p ? starts[s + 1] : layers;
    auto m = Model::CreateStage(c.spec, c.input, c.classes, starts[s], end);
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return {};
    (*m)->params().Initialize(kSeed);
    models.push_back(std::move(m).value());
    StageOptions o{s, p, kind, micro};
    auto r = StageRunner::Create(models.back().get(), s == p - 1 ? loss.get() : nullptr, o);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    run.planned_in_flight.push_back((*r)->planned_in_flight());
    runners.push_back(std::move(r).value());
  }
  run.peak_in_flight.assign(p, 0);
  run.peak_activation_bytes.assign(p, 0);
  if (wire == Wire::kShm && ring_bytes == 0) {
    int64_t most = 0;
    for (int64_t b : batches) most = std::max(most, (b + micro - 1) / micro);
    int64_t elems = 0;
    for (const auto& m : models) elems = std::max(elems, engine::NumElements(m->output_shape()));
    ring_bytes = RingBytesFor(1, most * elems);
  }
  std::vector<Data> data;
  for (size_t step = 0; step < batches.size(); ++step)
    data.push_back(MakeBatch(c, batches[step], step));
  // One thread per stage for the whole run, as a stage's process would
  // (oneDNN keeps per-thread state with its primitives); each stage steps
  // its own parameters.
  LocalExchange ex(p, absl::Seconds(60));
  collective::InMemoryStore store;
  std::vector<absl::Status> status(p);
  std::vector<std::thread> threads;
  std::mutex collect_mu;
  for (int s = 0; s < p; ++s) {
    threads.emplace_back([&, s] {
      std::unique_ptr<Transport> pair;
      if (wire == Wire::kGloo) {
        auto t = GlooTransport::Create(&store, s, p, collective::GlooOptions{}, absl::Seconds(60));
        if (!t.ok()) {
          status[s] = t.status();
          return;
        }
        pair = std::move(t).value();
      } else if (wire == Wire::kShm) {
        ShmTransportOptions so;
        so.activation_ring_bytes = so.gradient_ring_bytes = ring_bytes;
        auto t = ShmTransport::Create(&store, s, p, std::vector<bool>(p, true), so, nullptr);
        if (!t.ok()) {
          status[s] = t.status();
          return;
        }
        pair = std::move(t).value();
      }
      Transport& transport = pair != nullptr ? *pair : *ex.For(s);
      for (size_t step = 0; step < batches.size(); ++step) {
        const Data& d = data[step];
        auto r = runners[s]->Step(s == 0 ? &d.x : nullptr, s == p - 1 ? &d.y : nullptr,
                                  batches[step], transport, Ctx(static_cast<int64_t>(step)));
        if (!r.ok()) {
          status[s] = r.status();
          ex.Abort(r.status());
          break;
        }
        run.peak_in_flight[s] = std::max(run.peak_in_flight[s], r->peak_in_flight);
        run.peak_activation_bytes[s] =
            std::max(run.peak_activation_bytes[s], r->peak_activation_bytes);
        if (step + 1 < batches.size()) Sgd(models[s]->params());
      }
      // The stage's oneDNN primitives go on the thread that made them: its
      // scratchpad is that thread's (library mode), and a primitive freed
      // on another thread corrupted the next case's.
      std::lock_guard<std::mutex> lock(collect_mu);
      Collect(models[s]->params(), &run.values);
      runners[s].reset();
      models[s].reset();
      pair.reset();
    });
  }
  for (auto& t : threads) t.join();
  for (int s = 0; s < p; ++s) EXPECT_TRUE(status[s].ok()) << "stage " << s << ": " << status[s];
  EXPECT_EQ(ex.pending(), 0);
  return run;
}

void ExpectSame(const Values& want, const Values& got) {
  ASSERT_FALSE(want.empty());
  ASSERT_EQ(want.size(), got.size());
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << name << " is missing from the pipelined run";
    ASSERT_EQ(w.size(), it->second.size()) << name;
    int64_t differ = 0, first = -1;
    for (size_t i = 0; i < w.size(); ++i) {
      if (std::memcmp(&w[i], &it->second[i], sizeof(float)) != 0) {
        if (first < 0) first = static_cast<int64_t>(i);
        ++differ;
      }
    }
    EXPECT_EQ(differ, 0) << name << ": " << differ << " of " << w.size()
                         << " values differ, the first at " << first << " ("
                         << (first >= 0 ? w[first] : 0) << " vs "
                         << (first >= 0 ? it->second[first] : 0) << ")";
  }
}

struct Param {
  const char* name;
  ScheduleKind kind;
  int micro;
  std::vector<int64_t> batches;
};

Case Mlp() {
  Case c{"mlp", Zoo("mlp"), {6, 6, 1}, 10, 2, {}};
  c.spec.add_hidden(24);
  c.spec.add_hidden(16);
  c.spec.set_dropout(0.25f);  // masks per micro-batch, kept per activation set
  return c;
}

Case ResNet20(int stages) {
  return Case{"resnet20", Zoo("resnet20", 8), {8, 8, 3}, 10, stages, {}};
}

void PrintTo(const Param& p, std::ostream* os) { *os << p.name; }

class PipelineEquals : public ::testing::TestWithParam<Param> {};

void CheckCase(const Case& c, const Param& p) {
  const Values want = RunOneRank(c, p.batches, p.micro);
  const PipelineRun got = RunPipelined(c, p.batches, p.micro, p.kind);
  ExpectSame(want, got.values);
  // 1F1B keeps at most p - s micro-batches on stage s, GPipe every one.
  const int stages = static_cast<int>(got.peak_in_flight.size());
  for (int s = 0; s < stages; ++s) {
    EXPECT_LE(got.peak_in_flight[s], got.planned_in_flight[s]) << "stage " << s;
    if (p.kind == ScheduleKind::k1F1B) {
      EXPECT_LE(got.peak_in_flight[s], stages - s);
    }
  }
}

TEST_P(PipelineEquals, Mlp2Stages) { CheckCase(Mlp(), GetParam()); }
TEST_P(PipelineEquals, ResNet20In2Stages) { CheckCase(ResNet20(2), GetParam()); }
TEST_P(PipelineEquals, ResNet20In4Stages) { CheckCase(ResNet20(4), GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Schedules, PipelineEquals,
    ::testing::Values(Param{"OneFOneB_m4", ScheduleKind::k1F1B, 4, {8, 8, 8}},
                      Param{"GPipe_m4", ScheduleKind::kGPipe, 4, {8, 8, 8}},
                      // Fewer micro-batches than stages, then a short last step.
                      Param{"OneFOneB_m1", ScheduleKind::k1F1B, 1, {6, 6}},
                      Param{"OneFOneB_uneven", ScheduleKind::k1F1B, 4, {10, 10, 3}},
                      Param{"GPipe_uneven", ScheduleKind::kGPipe, 3, {10, 7}}),
    [](const ::testing::TestParamInfo<Param>& info) { return std::string(info.param.name); });

// The same equivalence with the messages over Gloo: real TCP pairs.
// The activation memory a stage holds, measured from its buffers: under
// GPipe stage s keeps all m micro-batches' activations, under 1F1B p - s of
// them, each costing what one micro-batch's forward holds (m = 1). ResNet-20
// in 2 and 4 stages, 8 micro-batches of 2.
TEST(StageRunner, ActivationBytesFollowTheSchedule) {
  for (int p : {2, 4}) {
    const Case c = ResNet20(p);
    const std::vector<int64_t> one =
        RunPipelined(c, {2}, 1, ScheduleKind::k1F1B).peak_activation_bytes;
    const PipelineRun gpipe = RunPipelined(c, {16}, 8, ScheduleKind::kGPipe);
    const PipelineRun f1b = RunPipelined(c, {16}, 8, ScheduleKind::k1F1B);
    ASSERT_EQ(one.size(), static_cast<size_t>(p));
    for (int s = 0; s < p; ++s) {
      SCOPED_TRACE(absl::StrCat(p, " stages, stage ", s));
      EXPECT_GT(one[s], 0);
      EXPECT_EQ(gpipe.peak_activation_bytes[s], 8 * one[s]);
      EXPECT_EQ(f1b.peak_activation_bytes[s], (p - s) * one[s]);
      std::printf(
          "p=%d stage %d: one micro-batch of 2 holds %lld bytes; GPipe m=8 %lld, 1F1B %lld\n", p, s,
          static_cast<long long>(one[s]), static_cast<long long>(gpipe.peak_activation_bytes[s]),
          static_cast<long long>(f1b.peak_activation_bytes[s]));
    }
  }
}

TEST(GlooTransport, ResNet20In2StagesEqualsOneRank) {
  const Case c = ResNet20(2);
  for (const Param& p : {Param{"1f1b", ScheduleKind::k1F1B, 4, {10, 10, 3}},
                         Param{"gpipe", ScheduleKind::kGPipe, 3, {8, 8}}}) {
    SCOPED_TRACE(p.name);
    const Values want = RunOneRank(c, p.batches, p.micro);
    ExpectSame(want, RunPipelined(c, p.batches, p.micro, p.kind, Wire::kGloo).values);
  }
}

TEST(GlooTransport, MlpIn3StagesEqualsOneRank) {
  Case c = Mlp();
  c.stages = 3;
  const Param p{"1f1b", ScheduleKind::k1F1B, 2, {6, 6}};
  ExpectSame(RunOneRank(c, p.batches, p.micro),
             RunPipelined(c, p.batches, p.micro, p.kind, Wire::kGloo).values);
}

// The same equivalence through shared-memory rings. The rings are sized
// for the step's messages, then shrunk to hold about one message, so that
// sends wait for room and records wrap around the ring's end.
TEST(ShmTransport, ResNet20In2StagesEqualsOneRank) {
  const Case c = ResNet20(2);
  const std::set<std::string> before = collective::testing::ShmSegments();
  for (const Param& p : {Param{"1f1b", ScheduleKind::k1F1B, 4, {10, 10, 3}},
                         Param{"gpipe", ScheduleKind::kGPipe, 3, {8, 8}}}) {
    for (const int64_t ring : {int64_t{1} << 20, int64_t{0}}) {
      SCOPED_TRACE(absl::StrCat(p.name, ", rings of ", ring, " bytes"));
      const Values want = RunOneRank(c, p.batches, p.micro);
      ExpectSame(want, RunPipelined(c, p.batches, p.micro, p.kind, Wire::kShm, ring).values);
    }
  }
  // Every segment was unlinked once both stages had mapped it.
  EXPECT_EQ(collective::testing::ShmSegments(), before);
}

TEST(ShmTransport, MlpIn3StagesEqualsOneRank) {
  Case c = Mlp();
  c.stages = 3;
  const Param p{"1f1b", ScheduleKind::k1F1B, 2, {6, 6}};
  ExpectSame(RunOneRank(c, p.batches, p.micro),
             RunPipelined(c, p.batches, p.micro, p.kind, Wire::kShm).values);
}

TEST(GlooTransport, AMissingMessageIsNamedAfterTheTimeout) {
  collective::InMemoryStore store;
  std::unique_ptr<GlooTransport> a, b;
  std::thread t([&] {
    a = GlooTransport::Create(&store, 0, 2, collective::GlooOptions{}, absl::Seconds(1)).value();
  });
  b = GlooTransport::Create(&store, 1, 2, collective::GlooOptions{}, absl::Milliseconds(300))
          .value();
  t.join();
  // A message that comes arrives whole (a gradient goes the other way in a
  // pipeline, but the wire is the same).
  Tensor src = Tensor::Zeros({4}), dst = Tensor::Zeros({4});
  for (int i = 0; i < 4; ++i) src.data<float>()[i] = 1.5f * i;
  const absl::Status sent = a->Send(1, MessageKind::kGradient, 0, src);
  ASSERT_TRUE(sent.ok()) << sent;
  const absl::Status got = b->Recv(0, MessageKind::kGradient, 0, &dst);
  ASSERT_TRUE(got.ok()) << got;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(dst.data<float>()[i], 1.5f * i);
  // One that never comes is named when the receive times out (Gloo then
  // counts the pair as failed: the attempt ends there).
  const absl::Status s = b->Recv(0, MessageKind::kActivation, 2, &dst);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("activation 2 from stage 0 to stage 1"), std::string::npos) << s;
}

TEST(PipelineSplit, UnevenExplicitSplitTrainsTheSame) {
  Case c = ResNet20(3);
  const Model::Cuts cuts = Model::PipelineCuts(c.spec, c.input, c.classes).value();
  ASSERT_GE(cuts.cuts.size(), 4u);
  // One cut early, one late: stages of very different sizes.
  c.starts = {0, cuts.cuts[1], cuts.cuts[cuts.cuts.size() - 1]};
  CheckCase(c, Param{"uneven_split", ScheduleKind::k1F1B, 4, {8, 8}});
}

TEST(PipelineSplit, CutsFallBetweenResidualBlocks) {
  const Case c = ResNet20(2);
  const Model::Cuts cuts = Model::PipelineCuts(c.spec, c.input, c.classes).value();
  // A ResNet-20 has 9 blocks: a cut after the stem, between each two blocks,
  // and within the head (pool, flatten/dense): none inside a block.
  for (int b : cuts.cuts) {
    auto stage = Model::CreateStage(c.spec, c.input, c.classes, b, cuts.layers);
    EXPECT_TRUE(stage.ok()) << "cut " << b << ": " << stage.status();
  }
  int inside = -1;
  for (int b = 1; b < cuts.layers && inside < 0; ++b) {
    if (std::find(cuts.cuts.begin(), cuts.cuts.end(), b) == cuts.cuts.end()) inside = b;
  }
  ASSERT_GT(inside, 0);
  auto bad = Model::CreateStage(c.spec, c.input, c.classes, inside, cuts.layers);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cannot cut the model before layer"), std::string::npos)
      << bad.status();
}

TEST(StageRunner, AStepWhoseBatchDisagreesWithItsInputsIsRefused) {
  const Case c = Mlp();
  const Model::Cuts cuts = Model::PipelineCuts(c.spec, c.input, c.classes).value();
  auto m = Model::CreateStage(c.spec, c.input, c.classes, 0, cuts.cuts.back()).value();
  auto r =
      StageRunner::Create(m.get(), nullptr, StageOptions{0, 2, ScheduleKind::k1F1B, 2}).value();
  LocalExchange ex(2, absl::Milliseconds(200));
  const Data d = MakeBatch(c, 4, 0);
  auto got = r->Step(&d.x, nullptr, 6, *ex.For(0), Ctx(0));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find("a step of 6 samples but 4 inputs"), std::string::npos)
      << got.status();
}

TEST(StageRunner, AStageThatNeverSendsIsNamed) {
  const Case c = Mlp();
  const Model::Cuts cuts = Model::PipelineCuts(c.spec, c.input, c.classes).value();
  auto m = Model::CreateStage(c.spec, c.input, c.classes, cuts.cuts.back(), cuts.layers).value();
  auto loss = engine::CreateLoss("softmax_cross_entropy").value();
  auto r =
      StageRunner::Create(m.get(), loss.get(), StageOptions{1, 2, ScheduleKind::k1F1B, 2}).value();
  LocalExchange ex(2, absl::Milliseconds(200));
  const Data d = MakeBatch(c, 4, 0);
  auto got = r->Step(nullptr, &d.y, 4, *ex.For(1), Ctx(0));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find("activation 0 from stage 0 to stage 1"), std::string::npos)
      << got.status();
}

}  // namespace
}  // namespace yoke::pipeline

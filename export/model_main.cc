// yoke-model: what `yoke export` and `yoke predict` run.
//
//   yoke-model export CHECKPOINT --format onnx -o MODEL.onnx [--batch N] [--softmax]
//   yoke-model predict CHECKPOINT [--data JOB.yaml|FOLDER] [--split test|train]
//                      [--top-k K] [-o FILE.csv] [--limit N] [--batch N]
//                      [--logits FILE] [--inputs FILE]
//
// Both need the engine, which the `yoke` CLI does not link: `yoke export` and
// `yoke predict` exec this binary, found beside `yoke`, as `yoke train` execs
// yoke-trainer. CHECKPOINT is a checkpoint file or a directory (its newest
// valid checkpoint). docs/export.md documents both commands.
//
// predict writes one line per example, "index,label,class,probability,..."
// (the top K classes, by name where the model has names; label -1 where the
// example's class is not one of the model's), to stdout or to -o FILE, and
// the accuracy to stderr, beside the test accuracy the training run reported
// at the checkpoint's last epoch. --logits and --inputs write the raw
// float32 logits (N, classes) and preprocessed inputs (N, input shape...),
// little-endian, for comparisons (tests/onnx_export_test.py).
//
// Exit status: 0, 2 for a bad command line, checkpoint or data set, 1 when
// writing fails.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "common/logging.h"
#include "export/loaded_model.h"
#include "export/onnx_export.h"
#include "export/predict.h"

namespace {

using yoke::exporter::LoadedModel;

int Fail(const char* cmd, const absl::Status& s, int code) {
  std::fprintf(stderr, "yoke %s: %s\n", cmd, std::string(s.message()).c_str());
  return code;
}

constexpr char kExportUsage[] =
    "usage: yoke export CHECKPOINT --format onnx -o MODEL.onnx [--batch N] [--softmax]\n"
    "  CHECKPOINT  a checkpoint file, or a directory: its newest valid checkpoint\n"
    "  --batch N   a fixed batch size (default: dynamic, the first dimension is 'N')\n"
    "  --softmax   output probabilities instead of logits\n";

int Export(const std::vector<std::string>& argv) {
  std::string format, out;
  int batch = 0;
  bool softmax = false;
  yoke::common::FlagParser p("yoke export", kExportUsage);
  p.String("--format", &format).String("--output,-o", &out).Int("--batch", &batch, 1);
  p.Bool("--softmax", &softmax);
  std::vector<std::string> pos;
  if (auto code = p.ParseOrExitCode(argv, &pos)) return *code;
  if (pos.size() != 1) return p.UsageError(stderr, "needs exactly one CHECKPOINT");
  if (format != "onnx") {
    return p.UsageError(stderr, absl::StrCat("--format: '", format, "' (known: onnx)"));
  }
  if (out.empty()) return p.UsageError(stderr, "-o MODEL.onnx is required");
  auto m = yoke::exporter::LoadModel(pos[0]);
  if (!m.ok()) return Fail("export", m.status(), 2);
  yoke::exporter::OnnxOptions o;
  o.batch = batch;
  o.softmax = softmax;
  if (absl::Status s = yoke::exporter::WriteOnnx(*m, o, out); !s.ok()) {
    return Fail("export", s, s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1);
  }
  std::fprintf(stderr, "yoke export: wrote %s (step %lld of %s, ONNX opset %lld)\n", out.c_str(),
               static_cast<long long>(m->step), m->path.c_str(),
               static_cast<long long>(yoke::exporter::kOnnxOpset));
  return 0;
}

constexpr char kPredictUsage[] =
    "usage: yoke predict CHECKPOINT [--data JOB.yaml|FOLDER] [--split test|train]\n"
    "                    [--top-k K] [-o FILE.csv] [--limit N] [--batch N]\n"
    "                    [--logits FILE] [--inputs FILE]\n"
    "  --data     a job file (its data.test, or data.train with --split train) or a\n"
    "             folder of class folders of images; default: the checkpoint's data\n"
    "  --top-k    classes per example (default 1)\n"
    "  -o         write the predictions there (CSV) instead of stdout\n"
    "  --logits, --inputs  also write the raw float32 logits / preprocessed inputs\n";

bool WriteRaw(const std::string& path, const std::vector<float>& v) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(v.data(), sizeof(float), v.size(), f) == v.size();
  return std::fclose(f) == 0 && ok;
}

std::string ClassName(const LoadedModel& m, int c) {
  return m.class_names.empty() ? absl::StrCat(c) : m.class_names[c];
}

// The CSV lines: index, label, then the top k classes with their softmax
// probabilities.
bool WritePredictions(const LoadedModel& m, const yoke::exporter::PredictResult& r, int top_k,
                      FILE* f) {
  const int k = r.classes;
  std::vector<int> order(k);
  std::vector<double> prob(k);
  std::fprintf(f, "index,label");
  for (int j = 1; j <= std::min(top_k, k); ++j) std::fprintf(f, ",class%d,probability%d", j, j);
  std::fprintf(f, "\n");
  for (int64_t i = 0; i < r.n; ++i) {
    const float* z = r.logits.data() + i * k;
    double mx = z[yoke::exporter::ArgMax(z, k)], sum = 0;
    for (int j = 0; j < k; ++j) sum += prob[j] = std::exp(static_cast<double>(z[j]) - mx);
    for (int j = 0; j < k; ++j) order[j] = j;
    // Largest first; equal logits keep the lower class first, as ArgMax does.
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return z[a] > z[b]; });
    const int32_t y = r.labels[i];
    std::fprintf(f, "%lld,%s", static_cast<long long>(i), y < 0 ? "-1" : ClassName(m, y).c_str());
    for (int j = 0; j < std::min(top_k, k); ++j) {
      std::fprintf(f, ",%s,%.6f", ClassName(m, order[j]).c_str(), prob[order[j]] / sum);
    }
    std::fprintf(f, "\n");
  }
  return !std::ferror(f);
}

void ReportAccuracy(const LoadedModel& m, const yoke::exporter::PredictResult& r) {
  std::fprintf(stderr, "yoke predict: %lld examples from %s\n", static_cast<long long>(r.n),
               r.source.c_str());
  if (r.labelled == 0) return;
  std::fprintf(stderr, "yoke predict: accuracy %.6f (%lld of %lld labelled examples)\n",
               static_cast<double>(r.correct) / static_cast<double>(r.labelled),
               static_cast<long long>(r.correct), static_cast<long long>(r.labelled));
  if (m.last_epoch.has_value() && m.last_epoch->test_accuracy() > 0) {
    std::fprintf(stderr,
                 "yoke predict: the training run reported test accuracy %.6f at epoch %lld\n",
                 m.last_epoch->test_accuracy(), static_cast<long long>(m.last_epoch->epoch()));
  }
}

int Predict(const std::vector<std::string>& argv) {
  yoke::exporter::PredictOptions o;
  std::string out, logits, inputs;
  int top_k = 1, limit = 0, batch = 0;
  yoke::common::FlagParser p("yoke predict", kPredictUsage);
  p.String("--data", &o.data).String("--split", &o.split).Int("--top-k", &top_k, 1);
  p.String("--output,-o", &out).Int("--limit", &limit, 0).Int("--batch", &batch, 0);
  p.String("--logits", &logits).String("--inputs", &inputs);
  std::vector<std::string> pos;
  if (auto code = p.ParseOrExitCode(argv, &pos)) return *code;
  if (pos.size() != 1) return p.UsageError(stderr, "needs exactly one CHECKPOINT");
  o.limit = limit;
  o.batch = batch;
  o.keep_inputs = !inputs.empty();
  auto m = yoke::exporter::LoadModel(pos[0]);
  if (!m.ok()) return Fail("predict", m.status(), 2);
  auto r = yoke::exporter::Predict(*m, o);
  if (!r.ok()) return Fail("predict", r.status(), 2);
  FILE* f = out.empty() ? stdout : std::fopen(out.c_str(), "w");
  if (f == nullptr || !WritePredictions(*m, *r, top_k, f) || (f != stdout && std::fclose(f) != 0)) {
    return Fail("predict", absl::InternalError(absl::StrCat("cannot write ", out)), 1);
  }
  if ((!logits.empty() && !WriteRaw(logits, r->logits)) ||
      (!inputs.empty() && !WriteRaw(inputs, r->inputs))) {
    return Fail("predict", absl::InternalError("cannot write --logits or --inputs"), 1);
  }
  ReportAccuracy(*m, *r);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  yoke::common::InitLogging("yoke-model", "warn");
  const std::string cmd = argc > 1 ? argv[1] : "";
  std::vector<std::string> rest;
  for (int i = 2; i < argc; ++i) rest.emplace_back(argv[i]);
  if (cmd == "export") return Export(rest);
  if (cmd == "predict") return Predict(rest);
  std::fputs(kExportUsage, stderr);
  std::fputs(kPredictUsage, stderr);
  return 2;
}

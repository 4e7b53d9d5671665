// tensorboard_write_tool: writes an event file with telemetry/tensorboard.h for
// tests/tensorboard_read_test.py, which reads it with TensorBoard itself.
//
//   tensorboard_write_tool DIR SCALARS TAGS
//
// Writes SCALARS scalars spread over TAGS tags ("tag0", "tag1", ...): for
// step s = 0, 1, ... each tag t in turn gets the float32 value
//   float(s) / 7.0f + float(t) * 0.5f
// (so the reader can recompute every value exactly), then one text summary,
// tag "job/config", step 0, holding kText below. Prints the file's path on
// stdout; exits 1 with the error on stderr if anything fails.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "telemetry/tensorboard.h"

namespace {

constexpr char kText[] = "# Job\n\n| key | value |\n|---|---|\n| lr | `0.1` |\n\nünïcode ✓";

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "tensorboard_write_tool: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s DIR SCALARS TAGS\n", argv[0]);
    return 2;
  }
  const long long scalars = std::atoll(argv[2]);
  const int tags = std::atoi(argv[3]);
  if (scalars < 0 || tags <= 0) {
    std::fprintf(stderr, "tensorboard_write_tool: SCALARS must be >= 0 and TAGS > 0\n");
    return 2;
  }
  auto w = yoke::common::EventFileWriter::Create(argv[1]);
  if (!w.ok()) return Fail(w.status());
  long long written = 0;
  for (int64_t step = 0; written < scalars; ++step) {
    for (int t = 0; t < tags && written < scalars; ++t, ++written) {
      const float value = static_cast<float>(step) / 7.0f + static_cast<float>(t) * 0.5f;
      absl::Status s = (*w)->WriteScalar("tag" + std::to_string(t), step, value);
      if (!s.ok()) return Fail(s);
    }
  }
  absl::Status s = (*w)->WriteText("job/config", 0, kText);
  if (s.ok()) s = (*w)->Close();
  if (!s.ok()) return Fail(s);
  std::printf("%s\n", (*w)->path().c_str());
  return 0;
}

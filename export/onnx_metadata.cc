#include "export/onnx_metadata.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace yoke::exporter {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

namespace {

// Floats as JSON numbers that read back to the same float32.
std::string JsonFloats(const google::protobuf::RepeatedField<float>& v) {
  std::vector<std::string> parts;
  for (float x : v) parts.push_back(absl::StrFormat("%.9g", x));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

void Put(onnx::ModelProto* model, const std::string& key, const std::string& value) {
  onnx::StringStringEntryProto* e = model->add_metadata_props();
  e->set_key(key);
  e->set_value(value);
}

// What an image_folder model was fed: every image decoded, resized, cropped.
std::string ImageJson(const v1::DatasetSpec& d) {
  std::string crop = d.crop().empty() ? "none" : d.crop();
  // A random training crop is a center crop in evaluation.
  if (crop == "random") crop = "center";
  std::string s = absl::StrCat("{\"image_size\": [", absl::StrJoin(d.image_size(), ", "),
                               "], \"channels\": ", d.channels() == 0 ? 3 : d.channels(),
                               ", \"crop\": ", JsonString(crop));
  if (crop != "none")
    absl::StrAppend(&s, ", \"crop_size\": [", absl::StrJoin(d.crop_size(), ", "), "]");
  const bool gray = d.channels() == 1;
  return absl::StrCat(s, ", \"resize\": \"antialiased bilinear\", \"channel_order\": ",
                      gray ? "\"gray\"" : "\"RGB\"", "}");
}

}  // namespace

void AddMetadata(const LoadedModel& m, bool softmax, onnx::ModelProto* model) {
  const v1::TransformSpec& t = m.spec.data().transform();
  const bool image = m.input_shape.size() == 3;
  const float divisor = t.divisor() == 0 ? 1.0f : t.divisor();
  Put(model, "yoke.input_layout", image ? "NHWC" : "NC");
  Put(model, "yoke.input_shape", absl::StrCat("[", absl::StrJoin(m.input_shape, ", "), "]"));
  Put(model, "yoke.transform.divisor", absl::StrFormat("%.9g", divisor));
  Put(model, "yoke.transform.mean", JsonFloats(t.mean()));
  Put(model, "yoke.transform.std", JsonFloats(t.std()));
  std::string pre = absl::StrCat("x = raw / ", absl::StrFormat("%g", divisor));
  if (t.mean_size() > 0) absl::StrAppend(&pre, "; x = x - mean[c]");
  if (t.std_size() > 0) absl::StrAppend(&pre, "; x = x / std[c]");
  Put(model, "yoke.preprocessing",
      absl::StrCat(pre,
                   " (c: the channel, the last axis; raw: the example as the dataset "
                   "reader gives it, e.g. bytes 0-255 for images)"));
  const v1::DatasetSpec& train = m.spec.data().train();
  Put(model, "yoke.dataset_format", train.format());
  if (train.format() == "image_folder") Put(model, "yoke.image", ImageJson(train));
  Put(model, "yoke.output", softmax ? "probabilities" : "logits");
  Put(model, "yoke.num_classes", absl::StrCat(m.num_classes));
  if (!m.class_names.empty()) {
    std::vector<std::string> names;
    for (const std::string& n : m.class_names) names.push_back(JsonString(n));
    Put(model, "yoke.class_names", absl::StrCat("[", absl::StrJoin(names, ", "), "]"));
  }
  Put(model, "yoke.checkpoint_step", absl::StrCat(m.step));
  model->set_doc_string(absl::StrCat("Yoke model (",
                                     m.spec.model().zoo().empty() ? "layers" : m.spec.model().zoo(),
                                     ") exported from step ", m.step, ". Input 'input': float32, ",
                                     image ? "(N, H, W, C)" : "(N, features)",
                                     ", preprocessed as yoke.preprocessing says. Output '",
                                     softmax ? "probabilities" : "logits", "': (N, classes)."));
}

}  // namespace yoke::exporter

#include "data/transforms.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/rng.h"

namespace yoke::data {

namespace {

// Keeps augmentation draws apart from the shuffle (see sampler.cc).
constexpr uint64_t kAugmentKey = 0x4155474D454E5431ull;  // "AUGMENT1"

absl::Status CheckPerChannel(const google::protobuf::RepeatedField<float>& v, int64_t channels,
                             const std::string& field) {
  if (v.size() != 0 && v.size() != 1 && v.size() != channels) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": needs 1 value or one per channel (", channels, "), got ", v.size()));
  }
  for (int i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "]: must be finite, got ", v[i]));
    }
  }
  return absl::OkStatus();
}

float PerChannel(const google::protobuf::RepeatedField<float>& v, int64_t c, float dflt) {
  if (v.empty()) return dflt;
  return v.size() == 1 ? v[0] : v[static_cast<int>(c)];
}

}  // namespace

absl::StatusOr<Transform> Transform::Create(const v1::TransformSpec& spec,
                                            const std::vector<int64_t>& example_shape,
                                            uint64_t seed, const std::string& fp) {
  Transform t = Identity(example_shape);
  t.seed_ = seed;
  const int64_t c = t.channels_;
  if (spec.divisor() < 0 || !std::isfinite(spec.divisor())) {
    return absl::InvalidArgumentError(
        absl::StrCat(fp, ".divisor: must be > 0 (or unset for 1), got ", spec.divisor()));
  }
  const float divisor = spec.divisor() == 0 ? 1.0f : spec.divisor();
  absl::Status s = CheckPerChannel(spec.mean(), c, fp + ".mean");
  if (!s.ok()) return s;
  s = CheckPerChannel(spec.std(), c, fp + ".std");
  if (!s.ok()) return s;
  for (int i = 0; i < spec.std_size(); ++i) {
    if (!(spec.std(i) > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(fp, ".std[", i, "]: must be > 0, got ", spec.std(i)));
    }
  }
  for (int64_t ch = 0; ch < c; ++ch) {
    const float mean = PerChannel(spec.mean(), ch, 0.0f);
    const float sd = PerChannel(spec.std(), ch, 1.0f);
    t.scale_[ch] = 1.0f / (divisor * sd);
    t.shift_[ch] = 0.0f - mean / sd;  // +0, not -0, when mean is 0
  }

  if (spec.random_crop_padding() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(fp, ".random_crop_padding: must be >= 0, got ", spec.random_crop_padding()));
  }
  const bool augment = spec.random_crop_padding() > 0 || spec.horizontal_flip();
  if (augment && example_shape.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        fp, spec.random_crop_padding() > 0 ? ".random_crop_padding" : ".horizontal_flip",
        ": needs (H, W, C) examples, got shape (", absl::StrJoin(example_shape, ", "), ")"));
  }
  t.padding_ = spec.random_crop_padding();
  t.flip_ = spec.horizontal_flip();
  return t;
}

Transform Transform::Identity(const std::vector<int64_t>& example_shape) {
  Transform t;
  t.shape_ = example_shape;
  t.channels_ = example_shape.empty() ? 1 : example_shape.back();
  t.numel_ = 1;
  for (int64_t d : example_shape) t.numel_ *= d;
  t.scale_.assign(t.channels_, 1.0f);
  t.shift_.assign(t.channels_, 0.0f);
  return t;
}

Transform::Augmentation Transform::Draw(int64_t epoch, int64_t index) const {
  Augmentation a;
  if (!augments()) return a;
  common::Philox rng(seed_ ^ kAugmentKey, static_cast<uint64_t>(epoch));
  rng.Seek(static_cast<uint64_t>(index));  // one 4-word block per example
  const uint32_t span = 2 * static_cast<uint32_t>(padding_) + 1;
  a.crop_y = static_cast<int>(rng.Next() % span);
  a.crop_x = static_cast<int>(rng.Next() % span);
  a.flip = flip_ && (rng.Next() & 1u);
  return a;
}

template <typename T>
void Transform::ApplyImpl(const T* src, float* dst, int64_t epoch, int64_t index,
                          bool train) const {
  const int64_t c = channels_;
  const float* scale = scale_.data();
  const float* shift = shift_.data();
  if (!train || !augments()) {
    if (c == 1) {
      const float a = scale[0], b = shift[0];
      for (int64_t j = 0; j < numel_; ++j) dst[j] = static_cast<float>(src[j]) * a + b;
      return;
    }
    for (int64_t j = 0; j < numel_; j += c) {
      for (int64_t k = 0; k < c; ++k) {
        dst[j + k] = static_cast<float>(src[j + k]) * scale[k] + shift[k];
      }
    }
    return;
  }
  const int64_t h = shape_[0], w = shape_[1];
  const Augmentation a = Draw(epoch, index);
  // Output pixel (y, x) reads padded pixel (y + crop_y, x' + crop_x), where
  // x' = W-1-x when flipped; padded pixel (py, px) is source (py-p, px-p).
  const int64_t dy = a.crop_y - padding_, dx = a.crop_x - padding_;
  for (int64_t y = 0; y < h; ++y) {
    float* row = dst + y * w * c;
    const int64_t sy = y + dy;
    if (sy < 0 || sy >= h) {
      for (int64_t x = 0; x < w; ++x) {
        for (int64_t k = 0; k < c; ++k) row[x * c + k] = shift[k];
      }
      continue;
    }
    const T* srow = src + sy * w * c;
    for (int64_t x = 0; x < w; ++x) {
      const int64_t sx = (a.flip ? w - 1 - x : x) + dx;
      float* out = row + x * c;
      if (sx < 0 || sx >= w) {
        for (int64_t k = 0; k < c; ++k) out[k] = shift[k];
      } else {
        const T* in = srow + sx * c;
        for (int64_t k = 0; k < c; ++k) out[k] = static_cast<float>(in[k]) * scale[k] + shift[k];
      }
    }
  }
}

void Transform::Apply(const uint8_t* src, float* dst, int64_t epoch, int64_t index,
                      bool train) const {
  ApplyImpl(src, dst, epoch, index, train);
}

void Transform::Apply(const float* src, float* dst, int64_t epoch, int64_t index,
                      bool train) const {
  ApplyImpl(src, dst, epoch, index, train);
}

}  // namespace yoke::data

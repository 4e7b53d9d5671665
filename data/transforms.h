// Transform: turns one stored example into the floats the model sees.
//
//   x = (value / divisor - mean[c]) / std[c]
//
// where c is the channel (the last dimension of the example shape: C of
// (H, W, C), or the feature index of a (D) vector). `mean` and `std` hold
// either one value for every channel or one per channel; divisor defaults
// to 1, mean to 0, std to 1.
//
// Training-time augmentation (images (H, W, C) only), in torchvision's order:
// random crop (pad `random_crop_padding` zero pixels on each side, cut an
// HxW window at a random offset), then horizontal flip with probability 1/2,
// then the normalisation above. Padding is zero in the stored value space,
// so a padded pixel becomes -mean[c]/std[c], as with torchvision's
// RandomCrop(padding) before Normalize. The random choices for an example are
// a pure function of (seed, epoch, dataset index): a resumed job, or one
// restarted with a different number of ranks, augments every example exactly
// as an uninterrupted run would.
//
// Thread-safety: a Transform is immutable after Create(); Apply() may run on
// many threads at once.
#ifndef YOKE_DATA_TRANSFORMS_H_
#define YOKE_DATA_TRANSFORMS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::data {

class Transform {
 public:
  // Validates `spec` against `example_shape` (mean/std counts against the
  // channels, std > 0, divisor > 0 when set, augmentation only for rank-3
  // shapes). Errors are INVALID_ARGUMENT naming `field_path`.<field>.
  // `seed` drives the augmentation (TrainingSpec.seed).
  static absl::StatusOr<Transform> Create(const v1::TransformSpec& spec,
                                          const std::vector<int64_t>& example_shape, uint64_t seed,
                                          const std::string& field_path = "data.transform");

  // The identity: value -> float(value), no augmentation.
  static Transform Identity(const std::vector<int64_t>& example_shape);

  // The augmentation drawn for example `index` in epoch `epoch`.
  struct Augmentation {
    int crop_y = 0;  // window offset in the padded image, in [0, 2*padding]
    int crop_x = 0;
    bool flip = false;
  };
  Augmentation Draw(int64_t epoch, int64_t index) const;

  // True when training examples are augmented (crop or flip is on).
  bool augments() const { return padding_ > 0 || flip_; }

  // src: example_numel() values in the example shape; dst: as many floats
  // (must not alias src). With train == false no augmentation is applied.
  void Apply(const uint8_t* src, float* dst, int64_t epoch, int64_t index, bool train) const;
  void Apply(const float* src, float* dst, int64_t epoch, int64_t index, bool train) const;

 private:
  Transform() = default;
  template <typename T>
  void ApplyImpl(const T* src, float* dst, int64_t epoch, int64_t index, bool train) const;

  std::vector<int64_t> shape_;
  int64_t channels_ = 1;
  int64_t numel_ = 0;
  // x * scale_[c] + shift_[c] == (x / divisor - mean[c]) / std[c].
  std::vector<float> scale_;
  std::vector<float> shift_;
  int padding_ = 0;
  bool flip_ = false;
  uint64_t seed_ = 0;
};

}  // namespace yoke::data

#endif  // YOKE_DATA_TRANSFORMS_H_

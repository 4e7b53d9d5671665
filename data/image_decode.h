// Image decoding and resizing for the image-folder reader.
//
// DecodeImage turns the bytes of a JPEG (TurboJPEG) or PNG (libspng) file into
// 8-bit pixels, (H, W, C) row-major, with C = 1 (grayscale) or 3 (RGB). The
// format is recognised by its signature, not by the file's extension. Colour
// becomes gray as libjpeg computes luma, (19595 R + 38470 G + 7471 B + 2^15)
// >> 16; gray becomes RGB by repeating it; a PNG's alpha channel is dropped;
// 16-bit PNG samples are reduced to 8 bits. Anything a decoder complains
// about, warnings included (a truncated JPEG is only a warning to libjpeg),
// is an error: INVALID_ARGUMENT with the decoder's message. Images larger than
// kMaxImagePixels are refused before any pixel memory is allocated.
//
// ResizeImage scales (H, W, C) bytes to (h, w, C) with a triangle (bilinear)
// filter, antialiased when shrinking: each output pixel is a weighted mean of
// the input pixels under a triangle whose radius is the shrink factor (at
// least 1 pixel), as PIL's and TensorFlow's antialiased bilinear resize
// compute it. Pixel centres sit at (i + 0.5); results are rounded to the
// nearest byte. Same size in and out copies the pixels unchanged.
//
// Thread-safety: free functions, safe from any thread.
#ifndef YOKE_DATA_IMAGE_DECODE_H_
#define YOKE_DATA_IMAGE_DECODE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace yoke::data {

// 2^26 pixels (8192 x 8192): far above any training image, and a bound on
// what one hostile header can make a decode thread allocate (192 MiB in RGB).
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 26;

struct Image {
  int64_t height = 0;
  int64_t width = 0;
  int channels = 0;
  std::vector<uint8_t> pixels;  // height * width * channels
};

// `channels` is 1 or 3.
absl::StatusOr<Image> DecodeImage(const void* data, size_t size, int channels);

// src: (src_h, src_w, c); dst: (dst_h, dst_w, c). Every size > 0.
void ResizeImage(const uint8_t* src, int64_t src_h, int64_t src_w, int c, uint8_t* dst,
                 int64_t dst_h, int64_t dst_w);

// PNG (libspng) and JPEG (TurboJPEG, quality 1..100, 4:4:4 chroma) encoders
// for `image` (1 or 3 channels): for scripts/make-image-folder and tests.
absl::StatusOr<std::string> EncodePng(const Image& image);
absl::StatusOr<std::string> EncodeJpeg(const Image& image, int quality);

}  // namespace yoke::data

#endif  // YOKE_DATA_IMAGE_DECODE_H_

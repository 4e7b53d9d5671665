// The JPEG (TurboJPEG) and PNG (libspng) decoders on arbitrary bytes, then the
// resize of whatever decodes. The first byte picks grayscale or RGB output and
// the resize target; decoding must return an image or an error.
#include <cstdint>
#include <vector>

#include "data/image_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t pick = data[0];
  const int channels = (pick & 1) != 0 ? 3 : 1;
  auto img = yoke::data::DecodeImage(data + 1, size - 1, channels);
  if (!img.ok()) return 0;
  if (img->pixels.size() != static_cast<size_t>(img->height * img->width * channels)) {
    __builtin_trap();
  }
  // Small targets keep each input fast: shrink, enlarge or keep the size.
  const int64_t h = 1 + ((pick >> 1) & 7) * 5, w = 1 + ((pick >> 4) & 7) * 5;
  std::vector<uint8_t> out(static_cast<size_t>(h * w * channels));
  if (img->height * img->width <= (int64_t{1} << 22)) {
    yoke::data::ResizeImage(img->pixels.data(), img->height, img->width, channels, out.data(), h,
                            w);
  }
  return 0;
}

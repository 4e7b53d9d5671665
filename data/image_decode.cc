#include "data/image_decode.h"

#include <spng.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace yoke::data {

namespace {

struct TjCloser {
  void operator()(void* h) const { tjDestroy(h); }
};
using TjHandle = std::unique_ptr<void, TjCloser>;

struct SpngCloser {
  void operator()(spng_ctx* c) const { spng_ctx_free(c); }
};
using SpngCtx = std::unique_ptr<spng_ctx, SpngCloser>;

bool IsJpeg(const uint8_t* p, size_t n) {
  return n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF;
}
bool IsPng(const uint8_t* p, size_t n) {
  static const uint8_t kSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  return n >= 8 && std::memcmp(p, kSig, 8) == 0;
}

absl::Status CheckSize(int64_t w, int64_t h) {
  if (w <= 0 || h <= 0 || w * h > kMaxImagePixels) {
    return absl::InvalidArgumentError(absl::StrCat("image of ", w, "x", h, " pixels (at most ",
                                                   kMaxImagePixels, " are accepted)"));
  }
  return absl::OkStatus();
}

absl::Status TjError(void* h, const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat("corrupt JPEG (", what, ": ", tjGetErrorStr2(h), ")"));
}

absl::StatusOr<Image> DecodeJpeg(const uint8_t* data, size_t size, int channels) {
  TjHandle h(tjInitDecompress());
  if (h == nullptr) return absl::InternalError("tjInitDecompress failed");
  int w = 0, ht = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(h.get(), data, static_cast<unsigned long>(size), &w, &ht, &subsamp,
                          &colorspace) != 0) {
    return TjError(h.get(), "header");
  }
  if (absl::Status s = CheckSize(w, ht); !s.ok()) return s;
  Image img;
  img.height = ht;
  img.width = w;
  img.channels = channels;
  img.pixels.resize(static_cast<size_t>(w) * ht * channels);
  // Warnings (a truncated stream, bad Huffman data) fail too: libjpeg would
  // fill the missing rows with gray and carry on.
  if (tjDecompress2(h.get(), data, static_cast<unsigned long>(size), img.pixels.data(), w, 0, ht,
                    channels == 1 ? TJPF_GRAY : TJPF_RGB, TJFLAG_STOPONWARNING) != 0) {
    return TjError(h.get(), "data");
  }
  return img;
}

absl::Status SpngError(int err, const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat("corrupt PNG (", what, ": ", spng_strerror(err), ")"));
}

// True when the chunks after the signature run to an IEND chunk within the
// file: libspng stops reading after the last pixel row, so a file cut short
// after its image data would otherwise pass.
bool PngReachesIend(const uint8_t* data, size_t size) {
  size_t pos = 8;
  while (size - pos >= 12) {
    const uint32_t len = (uint32_t{data[pos]} << 24) | (uint32_t{data[pos + 1]} << 16) |
                         (uint32_t{data[pos + 2]} << 8) | uint32_t{data[pos + 3]};
    if (len > size - pos - 12) return false;
    if (std::memcmp(data + pos + 4, "IEND", 4) == 0) return true;
    pos += 12 + static_cast<size_t>(len);
  }
  return false;
}

absl::StatusOr<Image> DecodePng(const uint8_t* data, size_t size, int channels) {
  if (!PngReachesIend(data, size)) {
    return absl::InvalidArgumentError("corrupt PNG (truncated: no IEND chunk)");
  }
  SpngCtx ctx(spng_ctx_new(0));
  if (ctx == nullptr) return absl::InternalError("spng_ctx_new failed");
  // Bound what a hostile file can make us allocate for ancillary chunks.
  spng_set_chunk_limits(ctx.get(), 1 << 24, 1 << 26);
  spng_set_image_limits(ctx.get(), 1 << 16, 1 << 16);
  if (int e = spng_set_png_buffer(ctx.get(), data, size); e != 0) return SpngError(e, "buffer");
  spng_ihdr ihdr{};
  if (int e = spng_get_ihdr(ctx.get(), &ihdr); e != 0) return SpngError(e, "header");
  if (absl::Status s = CheckSize(ihdr.width, ihdr.height); !s.ok()) return s;
  // G8 exists only for gray sources of <= 8 bits; everything else goes
  // through RGB8 (alpha dropped, 16 bits reduced), then to gray if asked.
  const bool direct_gray =
      channels == 1 && ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth <= 8;
  const int fmt = direct_gray ? SPNG_FMT_G8 : SPNG_FMT_RGB8;
  size_t out_size = 0;
  if (int e = spng_decoded_image_size(ctx.get(), fmt, &out_size); e != 0) {
    return SpngError(e, "size");
  }
  std::vector<uint8_t> out(out_size);
  if (int e = spng_decode_image(ctx.get(), out.data(), out.size(), fmt, 0); e != 0) {
    return SpngError(e, "data");
  }
  Image img;
  img.height = ihdr.height;
  img.width = ihdr.width;
  img.channels = channels;
  const size_t n = static_cast<size_t>(img.height) * img.width;
  if (direct_gray || channels == 3) {
    img.pixels = std::move(out);
  } else {
    img.pixels.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* p = out.data() + 3 * i;
      img.pixels[i] =
          static_cast<uint8_t>((19595u * p[0] + 38470u * p[1] + 7471u * p[2] + 32768u) >> 16);
    }
  }
  return img;
}

// One output coordinate's taps: input indices [first, first + weights.size()).
struct Taps {
  int64_t first = 0;
  std::vector<float> weights;
};

// Triangle filter, widened by the shrink factor when shrinking.
std::vector<Taps> ComputeTaps(int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / out;
  const double support = std::max(scale, 1.0);  // the triangle's radius, in input pixels
  std::vector<Taps> taps(out);
  for (int64_t o = 0; o < out; ++o) {
    const double center = (o + 0.5) * scale;
    int64_t lo = static_cast<int64_t>(std::floor(center - support));
    int64_t hi = static_cast<int64_t>(std::ceil(center + support));
    lo = std::max<int64_t>(lo, 0);
    hi = std::min<int64_t>(hi, in);
    Taps& t = taps[o];
    t.first = lo;
    double sum = 0;
    std::vector<double> w;
    for (int64_t i = lo; i < hi; ++i) {
      const double d = std::abs((i + 0.5 - center) / support);
      const double v = d < 1 ? 1 - d : 0;
      w.push_back(v);
      sum += v;
    }
    // Trim zero weights at both ends so the inner loops stay short.
    size_t a = 0, b = w.size();
    while (a < b && w[a] == 0) ++a;
    while (b > a && w[b - 1] == 0) --b;
    t.first = lo + static_cast<int64_t>(a);
    for (size_t k = a; k < b; ++k) t.weights.push_back(static_cast<float>(w[k] / sum));
  }
  return taps;
}

uint8_t ToByte(float v) {
  const float r = std::nearbyint(v);
  return static_cast<uint8_t>(r < 0 ? 0 : (r > 255 ? 255 : r));
}

}  // namespace

absl::StatusOr<Image> DecodeImage(const void* data, size_t size, int channels) {
  if (channels != 1 && channels != 3) {
    return absl::InvalidArgumentError(absl::StrCat("channels must be 1 or 3, got ", channels));
  }
  const auto* p = static_cast<const uint8_t*>(data);
  if (size == 0) return absl::InvalidArgumentError("empty file (0 bytes)");
  if (IsJpeg(p, size)) return DecodeJpeg(p, size, channels);
  if (IsPng(p, size)) return DecodePng(p, size, channels);
  return absl::InvalidArgumentError("not a JPEG or PNG file (unknown signature)");
}

void ResizeImage(const uint8_t* src, int64_t src_h, int64_t src_w, int c, uint8_t* dst,
                 int64_t dst_h, int64_t dst_w) {
  if (src_h == dst_h && src_w == dst_w) {
    std::memcpy(dst, src, static_cast<size_t>(src_h * src_w * c));
    return;
  }
  // Horizontal pass into floats (src_h, dst_w, c), then the vertical one.
  const std::vector<Taps> tx = ComputeTaps(src_w, dst_w);
  const std::vector<Taps> ty = ComputeTaps(src_h, dst_h);
  std::vector<float> mid(static_cast<size_t>(src_h * dst_w * c));
  for (int64_t y = 0; y < src_h; ++y) {
    const uint8_t* row = src + y * src_w * c;
    float* out = mid.data() + y * dst_w * c;
    for (int64_t x = 0; x < dst_w; ++x) {
      const Taps& t = tx[x];
      for (int k = 0; k < c; ++k) {
        float acc = 0;
        for (size_t j = 0; j < t.weights.size(); ++j) {
          acc += t.weights[j] * row[(t.first + static_cast<int64_t>(j)) * c + k];
        }
        out[x * c + k] = acc;
      }
    }
  }
  const int64_t stride = dst_w * c;
  std::vector<float> acc(static_cast<size_t>(stride));
  for (int64_t y = 0; y < dst_h; ++y) {
    const Taps& t = ty[y];
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (size_t j = 0; j < t.weights.size(); ++j) {
      const float w = t.weights[j];
      const float* in = mid.data() + (t.first + static_cast<int64_t>(j)) * stride;
      for (int64_t i = 0; i < stride; ++i) acc[i] += w * in[i];
    }
    uint8_t* out = dst + y * stride;
    for (int64_t i = 0; i < stride; ++i) out[i] = ToByte(acc[i]);
  }
}

absl::StatusOr<std::string> EncodePng(const Image& image) {
  if (image.channels != 1 && image.channels != 3) {
    return absl::InvalidArgumentError("EncodePng: 1 or 3 channels");
  }
  SpngCtx ctx(spng_ctx_new(SPNG_CTX_ENCODER));
  if (ctx == nullptr) return absl::InternalError("spng_ctx_new failed");
  spng_set_option(ctx.get(), SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(image.width);
  ihdr.height = static_cast<uint32_t>(image.height);
  ihdr.bit_depth = 8;
  ihdr.color_type = image.channels == 1 ? SPNG_COLOR_TYPE_GRAYSCALE : SPNG_COLOR_TYPE_TRUECOLOR;
  if (int e = spng_set_ihdr(ctx.get(), &ihdr); e != 0) return SpngError(e, "ihdr");
  if (int e = spng_encode_image(ctx.get(), image.pixels.data(), image.pixels.size(), SPNG_FMT_PNG,
                                SPNG_ENCODE_FINALIZE);
      e != 0) {
    return SpngError(e, "encode");
  }
  size_t len = 0;
  int err = 0;
  void* buf = spng_get_png_buffer(ctx.get(), &len, &err);
  if (buf == nullptr) return SpngError(err, "buffer");
  std::string out(static_cast<const char*>(buf), len);
  free(buf);
  return out;
}

absl::StatusOr<std::string> EncodeJpeg(const Image& image, int quality) {
  if (image.channels != 1 && image.channels != 3) {
    return absl::InvalidArgumentError("EncodeJpeg: 1 or 3 channels");
  }
  TjHandle h(tjInitCompress());
  if (h == nullptr) return absl::InternalError("tjInitCompress failed");
  unsigned char* buf = nullptr;
  unsigned long len = 0;
  const bool gray = image.channels == 1;
  if (tjCompress2(h.get(), image.pixels.data(), static_cast<int>(image.width), 0,
                  static_cast<int>(image.height), gray ? TJPF_GRAY : TJPF_RGB, &buf, &len,
                  gray ? TJSAMP_GRAY : TJSAMP_444, quality, TJFLAG_ACCURATEDCT) != 0) {
    absl::Status s = absl::InternalError(absl::StrCat("tjCompress2: ", tjGetErrorStr2(h.get())));
    tjFree(buf);
    return s;
  }
  std::string out(reinterpret_cast<const char*>(buf), len);
  tjFree(buf);
  return out;
}

}  // namespace yoke::data

// Counter-based random numbers (Philox-4x32-10), shared by the engine
// (dropout, initialisation) and data (shuffling, augmentation).
//
// The whole stream is a pure function of (seed, stream id, counter), so a
// resumed run reproduces dropout masks and augmentations exactly from the
// step number alone, without saving generator internals, and any thread can
// draw from its own stream without locks.
//
// Thread-safety: one Philox object is not thread-safe; give each thread its
// own (construction is free, and Seek() reaches any position in O(1)).
#ifndef YOKE_COMMON_RNG_H_
#define YOKE_COMMON_RNG_H_

#include <cstdint>

namespace yoke::common {

class Philox {
 public:
  Philox(uint64_t seed, uint64_t stream) : key_(seed), stream_(stream) {}

  // Next 32 random bits.
  uint32_t Next() {
    if (idx_ == 4) {
      Block(counter_++);
      idx_ = 0;
    }
    return out_[idx_++];
  }
  // Uniform in [0, 1).
  float NextFloat() { return (Next() >> 8) * (1.0f / 16777216.0f); }
  // Uniform integer in [0, n).
  uint64_t Uniform(uint64_t n) {
    uint64_t x = (static_cast<uint64_t>(Next()) << 32) | Next();
    return x % n;
  }
  // Jumps to block `counter` of the stream (4 draws per block).
  void Seek(uint64_t counter) {
    counter_ = counter;
    idx_ = 4;
  }

 private:
  void Block(uint64_t ctr) {
    uint32_t c0 = static_cast<uint32_t>(ctr), c1 = static_cast<uint32_t>(ctr >> 32);
    uint32_t c2 = static_cast<uint32_t>(stream_), c3 = static_cast<uint32_t>(stream_ >> 32);
    uint32_t k0 = static_cast<uint32_t>(key_), k1 = static_cast<uint32_t>(key_ >> 32);
    for (int r = 0; r < 10; ++r) {
      uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
      uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
      uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
      uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
      c0 = n0;
      c1 = static_cast<uint32_t>(p1);
      c2 = n2;
      c3 = static_cast<uint32_t>(p0);
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    out_[0] = c0;
    out_[1] = c1;
    out_[2] = c2;
    out_[3] = c3;
  }

  uint64_t key_;
  uint64_t stream_;
  uint64_t counter_ = 0;
  uint32_t out_[4] = {0, 0, 0, 0};
  int idx_ = 4;
};

}  // namespace yoke::common

#endif  // YOKE_COMMON_RNG_H_

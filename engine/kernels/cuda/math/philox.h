// The Philox-4x32-10 block function of common/rng.h, callable on the host
// and the device: PhiloxBlock(key, stream, counter) gives the four 32-bit
// draws that common::Philox(key, stream), after Seek(counter), returns from
// its next four Next() calls. Host tests (philox_fn_test.cc) prove the two
// equal draw for draw; dropout masks on the device rest on it.
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_PHILOX_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_PHILOX_H_

#include <cstdint>

#include "engine/kernels/cuda/math/hd.h"

namespace yoke::engine::cuda {

struct PhiloxDraws {
  uint32_t v[4];
};

// Ten rounds over (counter, stream) under key, as common::Philox::Block.
YOKE_HD inline PhiloxDraws PhiloxBlock(uint64_t key, uint64_t stream, uint64_t counter) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = static_cast<uint32_t>(p1);
    c2 = n2;
    c3 = static_cast<uint32_t>(p0);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return PhiloxDraws{{c0, c1, c2, c3}};
}

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_PHILOX_H_

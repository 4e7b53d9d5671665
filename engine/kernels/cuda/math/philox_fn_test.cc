// PhiloxBlock (philox.h) against common::Philox, draw for draw: block by
// block after Seek (counters with high bits set, as dropout's are) and as
// one sequential stream.
#include <cstdint>

#include "common/rng.h"
#include "engine/kernels/cuda/math/philox.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

TEST(PhiloxFnTest, BlockEqualsCommonPhiloxAfterSeek) {
  const uint64_t keys[] = {0, 1, 42, 0x44524F504F555421ull ^ 7, ~uint64_t{0}};
  const uint64_t streams[] = {0, 1, 123456789, uint64_t{1} << 40, ~uint64_t{0}};
  const uint64_t counters[] = {
      0, 1, 3, 0xFFFFFFFFull, (uint64_t{3} << 48) | (uint64_t{17} << 32) | 5, ~uint64_t{0}};
  for (uint64_t key : keys) {
    for (uint64_t stream : streams) {
      for (uint64_t counter : counters) {
        common::Philox rng(key, stream);
        rng.Seek(counter);
        const PhiloxDraws d = PhiloxBlock(key, stream, counter);
        for (int k = 0; k < 4; ++k) {
          EXPECT_EQ(d.v[k], rng.Next()) << key << " " << stream << " " << counter << " " << k;
        }
      }
    }
  }
}

TEST(PhiloxFnTest, ConsecutiveBlocksAreTheSequentialStream) {
  common::Philox rng(2024, 9);
  for (uint64_t b = 0; b < 1000; ++b) {
    const PhiloxDraws d = PhiloxBlock(2024, 9, b);
    for (int k = 0; k < 4; ++k) ASSERT_EQ(d.v[k], rng.Next()) << b << " " << k;
  }
}

}  // namespace
}  // namespace yoke::engine::cuda

// The bias kernels' functors (math/bias.h), run on the host as the device
// runs them, against plain loops: the add, and the two-pass gradient at row
// counts below, at and across the chunk size.
#include <vector>

#include "engine/kernels/cuda/math/bias.h"
#include "engine/kernels/cuda/math/host_for_each.h"
#include "engine/testing/random.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

TEST(BiasFnTest, AddBroadcastsOverRows) {
  const int64_t rows = 5, cols = 3;
  std::vector<float> y = testing::UniformVector(rows * cols, 1, 0);
  const std::vector<float> b = testing::UniformVector(cols, 1, 1);
  std::vector<float> want = y;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) want[r * cols + c] += b[c];
  }
  HostForEach(rows * cols, BiasAddFn{y.data(), b.data(), cols});
  EXPECT_EQ(y, want);
}

// Runs the two passes as BiasGradient (bias.cu) does.
std::vector<float> Gradient(const std::vector<float>& dy, int64_t rows, int64_t cols) {
  std::vector<float> db(cols, -7.0f);
  const int64_t chunks = BiasChunks(rows), chunk_rows = BiasChunkRows(rows);
  if (chunks == 1) {
    HostForEach(cols, BiasPartialSumFn{dy.data(), db.data(), rows, cols, chunk_rows});
    return db;
  }
  std::vector<float> partial(chunks * cols);
  HostForEach(chunks * cols, BiasPartialSumFn{dy.data(), partial.data(), rows, cols, chunk_rows});
  HostForEach(cols, BiasChunkSumFn{partial.data(), db.data(), chunks, cols});
  return db;
}

TEST(BiasFnTest, GradientSumsEveryRowOfEachColumn) {
  for (int64_t rows : {1, 3, 255, 256, 257, 1000, 70001}) {
    const int64_t cols = 7;
    const std::vector<float> dy = testing::UniformVector(rows * cols, 2, rows);
    std::vector<double> want(cols, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) want[c] += dy[r * cols + c];
    }
    const std::vector<float> got = Gradient(dy, rows, cols);
    for (int64_t c = 0; c < cols; ++c) {
      EXPECT_NEAR(got[c], want[c], 1e-4 * (1 + rows / 64)) << "rows " << rows << " col " << c;
    }
  }
}

TEST(BiasFnTest, GradientOfOneChunkIsTheCpuLoopBitForBit) {
  // dense.cc's CPU loop adds rows in order: one chunk must give its bits.
  const int64_t rows = 64, cols = 10;
  const std::vector<float> dy = testing::UniformVector(rows * cols, 3, 0);
  std::vector<float> want(cols, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) want[c] += dy[r * cols + c];
  }
  EXPECT_EQ(Gradient(dy, rows, cols), want);
}

TEST(BiasFnTest, ChunksCoverTheRowsAndStayNearTheSquareRoot) {
  EXPECT_EQ(BiasChunks(0), 1);
  EXPECT_EQ(BiasChunks(kBiasMinChunkRows), 1);
  EXPECT_EQ(BiasChunkRows(kBiasMinChunkRows), kBiasMinChunkRows);
  EXPECT_EQ(BiasChunks(kBiasMinChunkRows + 1), 2);
  EXPECT_EQ(BiasChunks(3 * kBiasMinChunkRows), 3);
  for (int64_t rows : {257, 1000, 65536, 802816, 3211264}) {
    const int64_t chunk = BiasChunkRows(rows), chunks = BiasChunks(rows);
    EXPECT_GE(chunk * chunks, rows) << rows;
    EXPECT_LT(chunk * (chunks - 1), rows) << rows;
    EXPECT_GE(chunk * chunk, rows) << rows;
    EXPECT_LE(chunks, chunk) << rows;
  }
  EXPECT_EQ(BiasChunkRows(3211264), 1792);  // ResNet stem, batch 256
}

}  // namespace
}  // namespace yoke::engine::cuda

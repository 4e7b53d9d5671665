// How a parameter-server job spreads its variables over its PS tasks: the
// model's flat parameter buffer (as the engine lays it out, every parameter
// in one array of floats) cut into contiguous, byte-balanced ranges, one per
// PS task that gets any.
//
// As TensorFlow's MinSizePartitioner does, a shard is never smaller than a
// minimum (256 KiB by default), so a small model lives on fewer PS tasks
// than the job has rather than paying a round trip per sliver: a model of
// B bytes gets min(num_ps, max(1, B / min_shard_bytes)) shards. Shard sizes
// differ by at most one float, the larger first.
//
// Thread-safety: pure functions.
#ifndef YOKE_PS_SHARD_MAP_H_
#define YOKE_PS_SHARD_MAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace yoke::ps {

inline constexpr int64_t kDefaultMinShardBytes = 256 << 10;

struct Shard {
  int ps = 0;          // the PS task that holds it
  int64_t offset = 0;  // first float in the flat buffer
  int64_t count = 0;   // floats
};

struct ShardMap {
  int64_t total = 0;          // floats in the flat buffer
  std::vector<Shard> shards;  // in offset order, covering [0, total) exactly
  // The shard holding float `index` (0 <= index < total).
  const Shard& ShardOf(int64_t index) const;
  // "3 shards of 262144..262145 floats on PS 0-2 (2 PS tasks idle)".
  std::string Describe(int num_ps) const;
};

// INVALID_ARGUMENT unless total_floats >= 1, num_ps >= 1 and
// min_shard_bytes >= 4.
absl::StatusOr<ShardMap> BuildShardMap(int64_t total_floats, int num_ps,
                                       int64_t min_shard_bytes = kDefaultMinShardBytes);

}  // namespace yoke::ps

#endif  // YOKE_PS_SHARD_MAP_H_

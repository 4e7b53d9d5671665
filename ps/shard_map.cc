#include "ps/shard_map.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace yoke::ps {

const Shard& ShardMap::ShardOf(int64_t index) const {
  auto it = std::upper_bound(shards.begin(), shards.end(), index,
                             [](int64_t i, const Shard& s) { return i < s.offset; });
  return *(it - 1);
}

std::string ShardMap::Describe(int num_ps) const {
  int64_t lo = total, hi = 0;
  for (const Shard& s : shards) {
    lo = std::min(lo, s.count);
    hi = std::max(hi, s.count);
  }
  const int n = static_cast<int>(shards.size());
  std::string text = absl::StrCat(n, n == 1 ? " shard of " : " shards of ", lo);
  if (hi != lo) absl::StrAppend(&text, "..", hi);
  absl::StrAppend(&text, " floats on PS ", n == 1 ? "0" : absl::StrCat("0-", n - 1));
  if (num_ps > n) absl::StrAppend(&text, " (", num_ps - n, " PS tasks idle)");
  return text;
}

absl::StatusOr<ShardMap> BuildShardMap(int64_t total_floats, int num_ps, int64_t min_shard_bytes) {
  if (total_floats < 1 || num_ps < 1 || min_shard_bytes < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("a shard map needs parameters, PS tasks and a minimum shard of a float; got ",
                     total_floats, " floats, ", num_ps, " PS tasks, ", min_shard_bytes, " bytes"));
  }
  const int64_t bytes = total_floats * 4;
  const int64_t n = std::min<int64_t>(num_ps, std::max<int64_t>(1, bytes / min_shard_bytes));
  ShardMap map;
  map.total = total_floats;
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t count = total_floats / n + (i < total_floats % n ? 1 : 0);
    map.shards.push_back({static_cast<int>(i), offset, count});
    offset += count;
  }
  return map;
}

}  // namespace yoke::ps

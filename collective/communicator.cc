// What communicator.h declares: the data types' sizes and names, and
// CreateCommunicator with the rank placement it decides by (RankHost,
// LocalRanks, and the hosts' leaders for the shared-memory path).
#include "collective/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/gloo_communicator.h"
#include "collective/shm_communicator.h"
#include "collective/shm_segment.h"
#include "collective/store.h"
#include "spdlog/spdlog.h"

namespace yoke::collective {
namespace {

// The hierarchical path's placement of `rank` (LocalRanks() found `locals`):
// hosts in order of their lowest rank, each one's leader that rank.
ShmPlacement Place(int rank, int size, const GlooOptions& gloo, std::vector<int> locals) {
  ShmPlacement p;
  p.locals = std::move(locals);
  std::vector<std::string> hosts;
  for (int r = 0; r < size; ++r) {
    const std::string h = RankHost(gloo.rank_hosts[r]);
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) {
      hosts.push_back(h);
      p.leader_hosts.push_back(gloo.rank_hosts[r]);
    }
    if (r == rank)
      p.host = static_cast<int>(std::find(hosts.begin(), hosts.end(), h) - hosts.begin());
  }
  return p;
}

}  // namespace

size_t DataTypeSize(DataType t) {
  switch (t) {
    case DataType::kF32:
    case DataType::kI32:
      return 4;
    case DataType::kF16:
    case DataType::kBF16:
      return 2;
    case DataType::kI64:
      return 8;
    case DataType::kU8:
      return 1;
  }
  return 0;
}

const char* DataTypeName(DataType t) {
  switch (t) {
    case DataType::kF32:
      return "f32";
    case DataType::kF16:
      return "f16";
    case DataType::kBF16:
      return "bf16";
    case DataType::kI32:
      return "i32";
    case DataType::kI64:
      return "i64";
    case DataType::kU8:
      return "u8";
  }
  return "unknown";
}

std::string RankHost(const std::string& rank_host) {
  const size_t at = rank_host.find('@');
  return at == std::string::npos ? rank_host : rank_host.substr(at + 1);
}

std::vector<int> LocalRanks(int rank, int size, const GlooOptions& gloo, const ShmOptions& shm) {
  if (!shm.enabled) return {};
  if (const char* v = std::getenv("YOKE_SHM"); v != nullptr && std::string(v) == "0") return {};
  if (static_cast<int>(gloo.rank_hosts.size()) != size || rank < 0 || rank >= size) return {};
  // A rank with no address ("w-1@") could be anywhere: without every
  // rank's address no rank groups, so that all ranks decide alike.
  for (const std::string& h : gloo.rank_hosts) {
    if (RankHost(h).empty()) return {};
  }
  // Decided from the whole job's layout, identically on every rank: the
  // hierarchical path as soon as any host has 2 or more ranks (a rank alone
  // on its host is then its host's leader), plain Gloo otherwise.
  std::map<std::string, int> per_host;
  for (const std::string& h : gloo.rank_hosts) ++per_host[RankHost(h)];
  int most = 0;
  for (const auto& [h, n] : per_host) most = std::max(most, n);
  if (most < 2 || most > shm::kMaxLocal) return {};
  const std::string host = RankHost(gloo.rank_hosts[rank]);
  std::vector<int> locals;
  for (int r = 0; r < size; ++r) {
    if (RankHost(gloo.rank_hosts[r]) == host) locals.push_back(r);
  }
  return locals;
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(Store* store, int rank, int size,
                                                                 const GlooOptions& gloo,
                                                                 const ShmOptions& shm) {
  std::vector<int> locals = LocalRanks(rank, size, gloo, shm);
  if (locals.empty()) {
    const char* env = std::getenv("YOKE_SHM");
    const bool off = !shm.enabled || (env != nullptr && std::string(env) == "0");
    spdlog::info("rank {}: allreduce: gloo for all {} rank(s) ({})", rank, size,
                 off ? "shm off" : "no host has several ranks");
    return CreateGlooCommunicator(store, rank, size, gloo);
  }
  const ShmPlacement place = Place(rank, size, gloo, std::move(locals));
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      CreateShmCommunicator(store, rank, size, place, gloo, shm);
  if (!comm.ok()) return comm;
  const int hosts = static_cast<int>(place.leader_hosts.size());
  if (place.locals.size() > 1) {
    spdlog::info("rank {}: allreduce: shm for {} local ranks, gloo across {} host(s)", rank,
                 place.locals.size(), hosts);
  } else {
    spdlog::info("rank {}: allreduce: alone on its host (no shm), gloo across {} host(s)", rank,
                 hosts);
  }
  return comm;
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(Store* store, int rank, int size,
                                                                 const GlooOptions& gloo) {
  return CreateCommunicator(store, rank, size, gloo, ShmOptions{});
}

}  // namespace yoke::collective

#include "jobspec/path_confinement.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/quote.h"
#include "common/status.h"

namespace yoke::common {
namespace {

// Symlinks resolved as far as the path exists here, then lexical clean-up.
std::string CanonicalPath(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::weakly_canonical(NormalizePath(path), ec);
  return ec ? NormalizePath(path) : NormalizePath(p.string());
}

// Appends to `errors` when `path` (set) is relative or outside every root.
void CheckPathUnder(std::vector<std::string>* errors, const std::string& field,
                    const std::string& path, const std::vector<std::string>& roots) {
  if (path.empty()) return;
  if (path[0] != '/') {
    errors->push_back(absl::StrCat(
        field, ": ", Quote(path),
        " must be an absolute path (allowed under: ", absl::StrJoin(roots, ", "), ")"));
    return;
  }
  const std::string norm = CanonicalPath(path);
  for (const std::string& root : roots) {
    if (root == "/" || norm == root || (absl::StartsWith(norm, root) && norm[root.size()] == '/')) {
      return;
    }
  }
  errors->push_back(absl::StrCat(field, ": ", Quote(path), " is outside the allowed directories (",
                                 absl::StrJoin(roots, ", "), ")"));
}

void CheckDatasetPaths(std::vector<std::string>* errors, const std::string& p,
                       const v1::DatasetSpec& d, const std::vector<std::string>& roots) {
  CheckPathUnder(errors, p + ".images", d.images(), roots);
  CheckPathUnder(errors, p + ".labels", d.labels(), roots);
  CheckPathUnder(errors, p + ".root", d.root(), roots);
  for (int i = 0; i < d.files_size(); ++i) {
    CheckPathUnder(errors, absl::StrCat(p, ".files[", i, "]"), d.files(i), roots);
  }
  CheckPathUnder(errors, p + ".cache_file", d.cache_file(), roots);
}

}  // namespace

absl::Status ValidateJobPaths(const v1::JobSpec& spec, const std::vector<std::string>& data_roots,
                              const std::vector<std::string>& checkpoint_roots) {
  // Each check runs on a copy with only the other kind of path cleared.
  v1::JobSpec data_only = spec;
  data_only.clear_checkpoint();
  data_only.clear_logging();
  // Image cache files are written, like checkpoints: they belong under the
  // checkpoint roots, not the (possibly read-only) data roots.
  data_only.mutable_data()->mutable_train()->clear_cache_file();
  if (data_only.data().has_test()) data_only.mutable_data()->mutable_test()->clear_cache_file();
  RETURN_IF_ERROR(ValidatePathsUnder(data_only, data_roots));
  v1::JobSpec checkpoint_only = spec;
  checkpoint_only.clear_data();
  if (!spec.data().train().cache_file().empty()) {
    checkpoint_only.mutable_data()->mutable_train()->set_cache_file(
        spec.data().train().cache_file());
  }
  if (!spec.data().test().cache_file().empty()) {
    checkpoint_only.mutable_data()->mutable_test()->set_cache_file(spec.data().test().cache_file());
  }
  return ValidatePathsUnder(checkpoint_only, checkpoint_roots);
}

std::string NormalizePath(const std::string& path) {
  const bool absolute = !path.empty() && path[0] == '/';
  std::vector<std::string> parts;
  for (absl::string_view s : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (s == ".") continue;
    if (s == "..") {
      if (!parts.empty() && parts.back() != "..") {
        parts.pop_back();
      } else if (!absolute) {
        parts.push_back("..");  // a relative path may climb above its start
      }
      continue;
    }
    parts.emplace_back(s);
  }
  std::string out = absl::StrJoin(parts, "/");
  if (absolute) return "/" + out;
  return out.empty() ? "." : out;
}

absl::Status ValidatePathsUnder(const v1::JobSpec& spec,
                                const std::vector<std::string>& allowed_roots) {
  if (allowed_roots.empty()) return absl::OkStatus();
  std::vector<std::string> roots;
  for (const std::string& r : allowed_roots) {
    if (r.empty() || r[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("allowed root '", r, "' must be an absolute directory"));
    }
    roots.push_back(CanonicalPath(r));
  }
  std::vector<std::string> errors;
  CheckDatasetPaths(&errors, "data.train", spec.data().train(), roots);
  if (spec.data().has_test()) CheckDatasetPaths(&errors, "data.test", spec.data().test(), roots);
  CheckPathUnder(&errors, "checkpoint.dir", spec.checkpoint().dir(), roots);
  if (spec.logging().tensorboard_dir() != "off") {
    CheckPathUnder(&errors, "logging.tensorboard_dir", spec.logging().tensorboard_dir(), roots);
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
}

}  // namespace yoke::common

#include "data/listing/image_folder_list.h"

#include <algorithm>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace yoke::common {

namespace fs = std::filesystem;

namespace {

// True when `path` (canonical) is `root` (canonical) or below it.
bool Inside(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root || (absl::StartsWith(path, root) && path[root.size()] == '/');
}

absl::Status CannotList(const fs::path& dir, const std::error_code& ec) {
  return absl::InvalidArgumentError(
      absl::StrCat(dir.string(), ": cannot list the class folder (", ec.message(), ")"));
}

}  // namespace

bool HasImageExtension(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  return absl::EndsWith(lower, ".jpg") || absl::EndsWith(lower, ".jpeg") ||
         absl::EndsWith(lower, ".png");
}

absl::StatusOr<std::string> ResolveInside(const fs::path& p, const std::string& root) {
  std::error_code ec;
  const fs::path real = fs::canonical(p, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat(p.string(), ": cannot resolve (", ec.message(), ")"));
  }
  if (!Inside(real.string(), root)) {
    return absl::InvalidArgumentError(absl::StrCat(p.string(), ": resolves to ", real.string(),
                                                   ", outside the image folder root ", root,
                                                   " (symlinks must stay inside the root)"));
  }
  return real.string();
}

absl::StatusOr<ImageFolderClasses> ListImageFolderClasses(const std::string& root) {
  std::error_code ec;
  const fs::path root_real = fs::canonical(root, ec);
  if (ec || !fs::is_directory(root_real, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(root, ": the image folder root must be a readable directory",
                     ec ? absl::StrCat(" (", ec.message(), ")") : ""));
  }
  ImageFolderClasses out;
  out.root = root_real.string();
  for (fs::directory_iterator it(root_real, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code sec;
    if (it->is_directory(sec)) out.names.push_back(it->path().filename().string());
  }
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat(root, ": cannot list the image folder (", ec.message(), ")"));
  }
  if (out.names.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(root, ": no class folders (expected root/<class>/*.{jpg,jpeg,png})"));
  }
  std::sort(out.names.begin(), out.names.end());
  return out;
}

absl::StatusOr<std::vector<ListedImage>> ListImageFolderClass(const ImageFolderClasses& classes,
                                                              const std::string& name,
                                                              int64_t limit) {
  const fs::path dir = fs::path(classes.root) / name;
  absl::StatusOr<std::string> dir_real = ResolveInside(dir, classes.root);
  if (!dir_real.ok()) return dir_real.status();
  std::vector<ListedImage> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(*dir_real, fs::directory_options::none, ec), end;
  if (ec) return CannotList(*dir_real, ec);
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const fs::directory_entry& e = *it;
    std::error_code sec;
    if (e.is_directory(sec) && !e.is_symlink(sec)) continue;
    const std::string file = e.path().filename().string();
    if (!HasImageExtension(file)) continue;
    out.push_back({e.path().parent_path().string(), file, e.path()});
    if (limit > 0 && static_cast<int64_t>(out.size()) >= limit) break;
  }
  if (ec) return CannotList(*dir_real, ec);
  if (out.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir.string(), ": class folder '", name,
                     "' holds no .jpg, .jpeg or .png images (every class needs at least one)"));
  }
  std::sort(out.begin(), out.end(), [](const ListedImage& a, const ListedImage& b) {
    return a.dir != b.dir ? a.dir < b.dir : a.name < b.name;
  });
  return out;
}

absl::StatusOr<ImageFolderSummary> CheckImageFolder(const std::string& root, bool full) {
  absl::StatusOr<ImageFolderClasses> classes = ListImageFolderClasses(root);
  if (!classes.ok()) return classes.status();
  ImageFolderSummary s;
  s.classes = static_cast<int64_t>(classes->names.size());
  for (const std::string& name : classes->names) {
    absl::StatusOr<std::vector<ListedImage>> listed =
        ListImageFolderClass(*classes, name, full ? 0 : 1);
    if (!listed.ok()) return listed.status();
    s.images += static_cast<int64_t>(listed->size());
  }
  if (!full) s.images = 0;
  return s;
}

}  // namespace yoke::common

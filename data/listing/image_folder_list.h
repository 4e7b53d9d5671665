// Listing an image folder (root/<class>/**/*.{jpg,jpeg,png}) without
// decoding anything: the rules data::ImageFolderDataset opens by, kept here,
// in data/listing/, so that `yoke validate --data` (the client) and the
// coordinator's submit check, which do not link data/, find exactly the
// errors the trainer would, with the same messages.
//
//   - an unreadable root, or a root without a class folder;
//   - a class folder (or, through a symlink, any image path) that resolves
//     outside the root: nothing outside the root is ever listed or read;
//   - a class folder without a .jpg, .jpeg or .png file (any case).
// Every error is INVALID_ARGUMENT and starts with the path at fault.
#ifndef YOKE_DATA_LISTING_IMAGE_FOLDER_LIST_H_
#define YOKE_DATA_LISTING_IMAGE_FOLDER_LIST_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace yoke::common {

// True for names ending in .jpg, .jpeg or .png, in any case.
bool HasImageExtension(const std::string& name);

// The canonical form of `p`, refused when it leaves `root` (canonical).
absl::StatusOr<std::string> ResolveInside(const std::filesystem::path& p, const std::string& root);

struct ImageFolderClasses {
  std::string root;                // canonical
  std::vector<std::string> names;  // class folder names, sorted byte-wise
};

// The root's class folders. Errors: an unreadable root, no class folder.
absl::StatusOr<ImageFolderClasses> ListImageFolderClasses(const std::string& root);

struct ListedImage {
  std::string dir;   // parent directory: the first ordering key
  std::string name;  // file name
  std::filesystem::path path;
};

// The image files of class `name` (recursively, not following directory
// symlinks), ordered by (directory, name); at most `limit` of them when
// limit > 0. Errors: the folder resolves outside the root, cannot be listed,
// or holds no image (naming the folder and the class).
absl::StatusOr<std::vector<ListedImage>> ListImageFolderClass(const ImageFolderClasses& classes,
                                                              const std::string& name,
                                                              int64_t limit = 0);

// The whole structure checked, nothing decoded: every class folder holds an
// image. With `full`, every image is listed and counted; otherwise a class
// stops at its first image (cheap enough for a submit RPC on a big tree).
struct ImageFolderSummary {
  int64_t classes = 0;
  int64_t images = 0;  // with full only
};
absl::StatusOr<ImageFolderSummary> CheckImageFolder(const std::string& root, bool full);

}  // namespace yoke::common

#endif  // YOKE_DATA_LISTING_IMAGE_FOLDER_LIST_H_

// WriteImageFolder: writes a dataset of images out as an image folder,
// root/<class>/<index>.<ext>, one PNG or JPEG file per example.
//
// Class folder names are "<label>_<name>" with the label zero-padded to the
// width of the largest one (0_t-shirt_top ... 9_ankle_boot), so their
// byte-wise order, which the image-folder reader numbers classes by, is the
// label order. File names are the example's index, zero-padded to the width
// of the largest index, so a class folder lists its examples in dataset
// order. Reading the tree back yields the same pixels for PNG (lossless),
// class by class.
//
// Used by scripts/make-image-folder (Fashion-MNIST) and by the tests.
#ifndef YOKE_DATA_IMAGE_FOLDER_WRITER_H_
#define YOKE_DATA_IMAGE_FOLDER_WRITER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "data/dataset.h"

namespace yoke::data {

struct ImageFolderWriteOptions {
  bool jpeg = false;  // PNG when false
  int quality = 95;   // JPEG quality, 1..100
  // class_names[label]; missing or empty names use the label alone.
  std::vector<std::string> class_names;
};

// `ds` holds u8 images of shape (H, W, 1) or (H, W, 3). Creates `root` and
// the class folders as needed; existing files of the same names are
// replaced.
absl::Status WriteImageFolder(const Dataset& ds, const std::string& root,
                              const ImageFolderWriteOptions& options);

// Fashion-MNIST's ten class names, label order, as folder-friendly words.
const std::vector<std::string>& FashionMnistClassNames();

}  // namespace yoke::data

#endif  // YOKE_DATA_IMAGE_FOLDER_WRITER_H_

// The dataset formats (data.*.format) that OpenDataset (data/open_dataset.h)
// opens. This list is the one place they are spelled: job validation
// (jobspec/) reads it without linking the readers and decoders, and
// OpenDataset keeps a table of openers that a static_assert checks against
// it, name for name and in order (common/name_list.h). Adding a format means
// adding it here and an opener there; either alone does not compile.
//
// This library holds only these strings: no reader code.
//
// Thread-safety: constexpr data; the accessor builds its vector once and is
// safe from any thread.
#ifndef YOKE_DATA_NAMES_FORMAT_NAMES_H_
#define YOKE_DATA_NAMES_FORMAT_NAMES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace yoke::data {

inline constexpr std::string_view kDatasetFormats[] = {"idx", "cifar10", "csv", "image_folder",
                                                       "synthetic"};

// kDatasetFormats as strings, in the same order (the order error messages
// list them in).
const std::vector<std::string>& DatasetFormats();

// The most values one synthetic example may have (the product of its
// `shape`): more is surely a typo. Job validation refuses it at submit and
// the synthetic reader with the same bound, so the trainer is never the
// first to say no.
inline constexpr int64_t kMaxSyntheticExampleValues = int64_t{1} << 30;

}  // namespace yoke::data

#endif  // YOKE_DATA_NAMES_FORMAT_NAMES_H_

#include "data/open_dataset.h"

#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/name_list.h"
#include "common/status.h"
#include "data/cifar_reader.h"
#include "data/csv_reader.h"
#include "data/idx_reader.h"
#include "data/image_folder.h"
#include "data/names/format_names.h"
#include "data/synthetic_dataset.h"

namespace yoke::data {

namespace {

absl::Status Required(const std::string& field_path, const char* field, const std::string& format) {
  return absl::InvalidArgumentError(
      absl::StrCat(field_path, ".", field, ": required for format '", format, "'"));
}

// Reader errors start with a file path; say which spec named the file.
absl::StatusOr<std::unique_ptr<Dataset>> Prefixed(absl::StatusOr<std::unique_ptr<Dataset>> ds,
                                                  const std::string& field_path) {
  if (!ds.ok()) return common::Annotate(ds.status(), field_path);
  return ds;
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenIdx(const v1::DatasetSpec& spec,
                                                 const std::string& fp) {
  if (spec.images().empty()) return Required(fp, "images", spec.format());
  if (spec.labels().empty()) return Required(fp, "labels", spec.format());
  return Prefixed(ReadIdx(spec.images(), spec.labels()), fp);
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenCifar10(const v1::DatasetSpec& spec,
                                                     const std::string& fp) {
  if (spec.files().empty()) return Required(fp, "files", spec.format());
  return Prefixed(ReadCifar10({spec.files().begin(), spec.files().end()}), fp);
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenCsv(const v1::DatasetSpec& spec,
                                                 const std::string& fp) {
  if (spec.files_size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(fp, ".files: format 'csv' takes exactly one file, got ", spec.files_size()));
  }
  CsvOptions o;
  o.label_column = spec.has_label_column() ? spec.label_column() : -1;
  o.header = spec.header();
  o.shape.assign(spec.shape().begin(), spec.shape().end());
  return Prefixed(ReadCsv(spec.files(0), o), fp);
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenImageFolder(const v1::DatasetSpec& spec,
                                                         const std::string& fp) {
  if (spec.root().empty()) return Required(fp, "root", spec.format());
  if (spec.image_size_size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(fp, ".image_size: format 'image_folder' needs [height, width], got ",
                     spec.image_size_size(), " values"));
  }
  ImageFolderOptions o;
  o.root = spec.root();
  o.height = spec.image_size(0);
  o.width = spec.image_size(1);
  o.channels = spec.channels() == 0 ? 3 : spec.channels();
  if (spec.crop() == "center" || spec.crop() == "random") {
    o.crop = spec.crop() == "center" ? CropMode::kCenter : CropMode::kRandom;
    if (spec.crop_size_size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(fp, ".crop_size: crop '", spec.crop(),
                                                     "' needs [height, width], got ",
                                                     spec.crop_size_size(), " values"));
    }
    o.crop_height = spec.crop_size(0);
    o.crop_width = spec.crop_size(1);
  } else if (!spec.crop().empty() && spec.crop() != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat(fp, ".crop: unknown crop '", spec.crop(), "' (known: none, center, random)"));
  }
  o.validation_split = spec.validation_split();
  o.subset = spec.subset();
  o.seed = spec.seed();
  o.cache = spec.cache();
  o.cache_file = spec.cache_file();
  if (!spec.on_bad_image().empty() && spec.on_bad_image() != "fail" &&
      spec.on_bad_image() != "skip") {
    return absl::InvalidArgumentError(
        absl::StrCat(fp, ".on_bad_image: unknown '", spec.on_bad_image(), "' (known: fail, skip)"));
  }
  o.skip_bad = spec.on_bad_image() == "skip";
  absl::StatusOr<std::unique_ptr<ImageFolderDataset>> ds = ImageFolderDataset::Open(o);
  if (!ds.ok()) return common::Annotate(ds.status(), fp);
  return std::unique_ptr<Dataset>(std::move(*ds));
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenSynthetic(const v1::DatasetSpec& spec,
                                                       const std::string& fp) {
  SyntheticOptions o;
  o.shape.assign(spec.shape().begin(), spec.shape().end());
  o.num_classes = spec.num_classes();
  o.num_examples = spec.num_examples();
  o.seed = spec.seed();
  absl::StatusOr<std::unique_ptr<Dataset>> ds = MakeSynthetic(o);
  // Synthetic errors name the bare field ("shape: ..."); complete the path.
  if (!ds.ok()) {
    return absl::Status(ds.status().code(), absl::StrCat(fp, ".", ds.status().message()));
  }
  return ds;
}

struct FormatEntry {
  std::string_view name;
  absl::StatusOr<std::unique_ptr<Dataset>> (*open)(const v1::DatasetSpec& spec,
                                                   const std::string& field_path);
};

// One opener per name of kDatasetFormats, in its order.
constexpr FormatEntry kOpeners[] = {
    {"idx", OpenIdx},
    {"cifar10", OpenCifar10},
    {"csv", OpenCsv},
    {"image_folder", OpenImageFolder},
    {"synthetic", OpenSynthetic},
};
static_assert(common::NamesMatch(kOpeners, kDatasetFormats),
              "kOpeners must open exactly kDatasetFormats (data/names/format_names.h), in its "
              "order");

absl::StatusOr<std::unique_ptr<Dataset>> OpenByFormat(const v1::DatasetSpec& spec,
                                                      const std::string& fp) {
  const std::string& f = spec.format();
  for (const FormatEntry& e : kOpeners) {
    if (f == e.name) return e.open(spec, fp);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      fp, ".format: ", f.empty() ? "required" : absl::StrCat("unknown format '", f, "'"),
      " (known: ", absl::StrJoin(DatasetFormats(), ", "), ")"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const v1::DatasetSpec& spec,
                                                     const std::string& field_path) {
  if (spec.num_examples() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field_path, ".num_examples: must be >= 0 (0 = all), got ", spec.num_examples()));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Dataset> d, OpenByFormat(spec, field_path));
  if (spec.format() != "synthetic" && spec.num_examples() > 0) {
    d = TakeFirst(std::move(d), spec.num_examples());
  }
  return d;
}

}  // namespace yoke::data

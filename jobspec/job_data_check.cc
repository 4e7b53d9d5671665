#include "jobspec/job_data_check.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "data/listing/idx_shape.h"
#include "data/listing/image_folder_list.h"

namespace yoke::common {

namespace {

// `path` (named by `field`) opens for reading and is a regular file.
absl::Status Readable(const std::string& field, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat(field, ": ", path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::InvalidArgumentError(msg);
  }
  struct stat st;
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  ::close(fd);
  if (!regular) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", path, ": not a regular file"));
  }
  return absl::OkStatus();
}

// One dataset; "" when the mode leaves it unchecked.
absl::StatusOr<std::string> CheckDataset(const std::string& p, const v1::DatasetSpec& d,
                                         DataCheck mode) {
  const std::string& f = d.format();
  if (f == "image_folder") {
    if (mode == DataCheck::kLocalImageFolders) {
      std::error_code ec;
      if (!std::filesystem::exists(d.root(), ec)) return std::string();
    }
    const bool full = mode == DataCheck::kAll;
    absl::StatusOr<ImageFolderSummary> s = CheckImageFolder(d.root(), full);
    if (!s.ok()) return Annotate(s.status(), p);
    return absl::StrCat(p, ": image_folder ", d.root(), ": ", s->classes, " classes",
                        full ? absl::StrCat(", ", s->images, " images listed (not decoded)")
                             : ", each with an image");
  }
  if (mode != DataCheck::kAll) return std::string();
  std::vector<std::string> files;
  if (f == "idx") {
    RETURN_IF_ERROR(Readable(p + ".images", d.images()));
    RETURN_IF_ERROR(Readable(p + ".labels", d.labels()));
    files = {d.images(), d.labels()};
  } else if (f == "cifar10" || f == "csv") {
    for (int i = 0; i < d.files_size(); ++i) {
      RETURN_IF_ERROR(Readable(absl::StrCat(p, ".files[", i, "]"), d.files(i)));
      files.push_back(d.files(i));
    }
  } else {
    return absl::StrCat(p, ": ", f, ": no files to check");
  }
  return absl::StrCat(p, ": ", f, ": ", absl::StrJoin(files, ", "), " readable");
}

}  // namespace

absl::StatusOr<std::vector<std::string>> CheckJobData(const v1::JobSpec& spec, DataCheck mode) {
  std::vector<std::string> lines;
  for (const auto& [p, d] :
       {std::pair<std::string, const v1::DatasetSpec*>{"data.train", &spec.data().train()},
        {"data.test", &spec.data().test()}}) {
    if (p == "data.test" && !spec.data().has_test()) continue;
    absl::StatusOr<std::string> line = CheckDataset(p, *d, mode);
    if (!line.ok()) return line.status();
    if (!line->empty()) lines.push_back(*std::move(line));
  }
  return lines;
}

std::vector<int64_t> VisibleIdxShape(const v1::JobSpec& spec) {
  const v1::DatasetSpec& train = spec.data().train();
  if (train.format() != "idx" || train.images().empty() || train.images()[0] != '/') return {};
  absl::StatusOr<std::vector<int64_t>> shape = IdxImageShape(train.images());
  return shape.ok() ? *std::move(shape) : std::vector<int64_t>{};
}

}  // namespace yoke::common

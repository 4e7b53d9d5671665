// TempDir: a fresh directory under $TMPDIR (mkdtemp), removed with
// everything in it when the object is destroyed. For tests and benchmarks;
// path() is "" if the directory could not be made.
#ifndef YOKE_COMMON_TESTING_TEMP_DIR_H_
#define YOKE_COMMON_TESTING_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace yoke::common {

class TempDir {
 public:
  // `prefix` starts the directory's name ("yoke_data" -> yoke_data_Ab12Cd).
  explicit TempDir(const std::string& prefix = "yoke") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    path_ = mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/name.
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace yoke::common

#endif  // YOKE_COMMON_TESTING_TEMP_DIR_H_

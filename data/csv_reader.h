// CSV reader: one example per line, numeric feature columns plus one label
// column.
//
// Cells are separated by commas and may be padded with spaces; quoting is not
// supported (numeric data needs none). Blank lines are skipped. Every row
// must have the same number of columns as the first. Features must be finite
// numbers, labels non-negative integers (num_classes = largest label + 1).
// Errors name the file, the 1-based line and column, and the cell.
//
// Features are stored as floats, shape (D) where D = columns - 1, or
// `shape` when given (its product must equal D), e.g. (8, 8, 1) for a
// flattened 8x8 image.
#ifndef YOKE_DATA_CSV_READER_H_
#define YOKE_DATA_CSV_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace yoke::data {

struct CsvOptions {
  // Column index of the label; negative counts from the end (-1 = last).
  int label_column = -1;
  // The first non-blank line names the columns and is skipped.
  bool header = false;
  // Example shape; empty means (D).
  std::vector<int64_t> shape;
};

// Labels above this are refused: num_classes sizes the model's last layer.
inline constexpr int64_t kCsvMaxLabel = 1000000;

absl::StatusOr<std::unique_ptr<Dataset>> ReadCsv(const std::string& path,
                                                 const CsvOptions& options);

}  // namespace yoke::data

#endif  // YOKE_DATA_CSV_READER_H_

#include "data/csv_reader.h"

#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status.h"
#include "data/input_file.h"

namespace yoke::data {

namespace {

// Plenty for tabular data; keeps a mistaken path to a huge file from
// exhausting memory as float vectors.
constexpr uint64_t kMaxCsvBytes = uint64_t{1} << 32;

// What is wrong with a cell, without its bytes: a message must never carry
// a file's content (a CSV path pointed at /etc/shadow would echo it).
std::string NotANumber(absl::string_view cell) {
  if (cell.empty()) return "is empty, not a finite number";
  float v = 0;
  if (absl::SimpleAtof(cell, &v)) return "is NaN or infinite, not a finite number";
  return absl::StrCat("is not a number (a cell of ", cell.size(), " bytes)");
}

std::string NotALabel(absl::string_view cell) {
  float v = 0;
  if (cell.empty()) return "is empty";
  if (!absl::SimpleAtof(cell, &v))
    return absl::StrCat("is not a number (a cell of ", cell.size(), " bytes)");
  if (v < 0) return "is negative";
  // No cast to an integer: one of a value past int64's range is undefined
  // behaviour (the fuzzer sent 6.7e32).
  if (v != std::floor(v)) return "is not a whole number";
  return "is too large";
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> ReadCsv(const std::string& path,
                                                 const CsvOptions& options) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> raw, ReadWholeFile(path, kMaxCsvBytes));
  const absl::string_view text(reinterpret_cast<const char*>(raw.data()), raw.size());

  int64_t ncols = -1, label_col = -1;
  bool header_pending = options.header;
  std::vector<float> features;
  std::vector<int32_t> labels;
  int64_t max_label = -1;
  int64_t line_no = 0;
  std::vector<absl::string_view> cells;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);  // also drops a CRLF's '\r'
    if (line.empty()) continue;
    cells = absl::StrSplit(line, ',');
    const auto where = [&](size_t col) {
      return absl::StrCat(path, ": line ", line_no, ", column ", col + 1);
    };
    if (ncols < 0) {
      ncols = static_cast<int64_t>(cells.size());
      if (ncols < 2) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": line ", line_no, " has ", ncols,
                         " column; need at least one feature and a label"));
      }
      label_col = options.label_column < 0 ? ncols + options.label_column : options.label_column;
      if (label_col < 0 || label_col >= ncols) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": label_column ", options.label_column, " is out of range for ",
                         ncols, " columns (use 0..", ncols - 1, ", or -1 for the last)"));
      }
    } else if (static_cast<int64_t>(cells.size()) != ncols) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": line ", line_no, " has ",
                                                     cells.size(), " columns, expected ", ncols,
                                                     " like the first line"));
    }
    if (header_pending) {
      header_pending = false;
      continue;
    }
    for (size_t c = 0; c < cells.size(); ++c) {
      const absl::string_view cell = absl::StripAsciiWhitespace(cells[c]);
      if (static_cast<int64_t>(c) == label_col) {
        int64_t label = 0;
        if (!absl::SimpleAtoi(cell, &label) || label < 0 || label > kCsvMaxLabel) {
          return absl::InvalidArgumentError(absl::StrCat(where(c), ": the label ", NotALabel(cell),
                                                         "; labels are integers in [0, ",
                                                         kCsvMaxLabel, "]"));
        }
        labels.push_back(static_cast<int32_t>(label));
        if (label > max_label) max_label = label;
      } else {
        float v = 0;
        if (!absl::SimpleAtof(cell, &v) || !std::isfinite(v)) {
          return absl::InvalidArgumentError(
              absl::StrCat(where(c), ": the value ", NotANumber(cell)));
        }
        features.push_back(v);
      }
    }
  }
  if (labels.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": holds no data rows"));
  }

  const int64_t d = ncols - 1;
  std::vector<int64_t> shape = options.shape;
  if (shape.empty()) {
    shape = {d};
  } else {
    int64_t prod = 1;
    for (int64_t s : shape) {
      if (s <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": shape ", ShapeToString(shape), " has a dimension <= 0"));
      }
      // Dimensions larger than d can never multiply to d; stopping here
      // also keeps the product from overflowing.
      prod = s > d ? d + 1 : prod * s;
      if (prod > d) break;
    }
    if (prod != d) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": shape ", ShapeToString(shape),
                                                     " must hold exactly the ", d,
                                                     " features of a row"));
    }
  }
  return std::unique_ptr<Dataset>(std::make_unique<FloatDataset>(
      std::move(shape), static_cast<int>(max_label + 1), std::move(features), std::move(labels)));
}

}  // namespace yoke::data

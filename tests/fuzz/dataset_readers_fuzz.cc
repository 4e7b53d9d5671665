// The IDX, CIFAR-10 and CSV readers on arbitrary file contents. The first
// byte picks the reader (and, for IDX, how the rest splits into an images
// and a labels file); the readers must return a dataset or an error.
#include <cstdint>
#include <string>

#include "data/cifar_reader.h"
#include "data/csv_reader.h"
#include "data/idx_reader.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t pick = data[0];
  data += 1;
  size -= 1;
  switch (pick % 4) {
    case 0: {  // IDX: a byte choosing the split, then images | labels
      const size_t rest = size - 1;
      const size_t cut = static_cast<size_t>(data[0]) * rest / 255;
      const std::string images = yoke::fuzz::WriteInput(data + 1, cut, 0);
      const std::string labels = yoke::fuzz::WriteInput(data + 1 + cut, rest - cut, 1);
      (void)yoke::data::ReadIdx(images, labels);
      break;
    }
    case 1:
      (void)yoke::data::ReadCifar10({yoke::fuzz::WriteInput(data, size)});
      break;
    default: {
      yoke::data::CsvOptions o;
      o.header = (pick & 4) != 0;
      o.label_column = (pick & 8) != 0 ? 0 : -1;
      if ((pick & 16) != 0) o.shape = {2, 2};
      (void)yoke::data::ReadCsv(yoke::fuzz::WriteInput(data, size), o);
      break;
    }
  }
  return 0;
}

// DataTypeSize / DataTypeName (declared in communicator.h).
#include "collective/communicator.h"

namespace yoke::collective {

size_t DataTypeSize(DataType t) {
  switch (t) {
    case DataType::kF32:
    case DataType::kI32:
      return 4;
    case DataType::kF16:
    case DataType::kBF16:
      return 2;
    case DataType::kI64:
      return 8;
    case DataType::kU8:
      return 1;
  }
  return 0;
}

const char* DataTypeName(DataType t) {
  switch (t) {
    case DataType::kF32:
      return "f32";
    case DataType::kF16:
      return "f16";
    case DataType::kBF16:
      return "bf16";
    case DataType::kI32:
      return "i32";
    case DataType::kI64:
      return "i64";
    case DataType::kU8:
      return "u8";
  }
  return "unknown";
}

}  // namespace yoke::collective

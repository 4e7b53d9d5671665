// Yoke's C++ API for custom training loops: everything in one include.
//
//   #include "yoke/yoke.h"
//
// See docs/cpp_api.md for a complete example. The API is the headers under
// include/yoke/; they use only the standard library and absl::Status /
// absl::StatusOr, and hide the engine, data and collective internals.
#ifndef YOKE_YOKE_H_
#define YOKE_YOKE_H_

#include "yoke/data.h"
#include "yoke/distributed.h"
#include "yoke/evaluate.h"
#include "yoke/loss.h"
#include "yoke/model.h"
#include "yoke/optimizer.h"
#include "yoke/status.h"
#include "yoke/tensor.h"

#endif  // YOKE_YOKE_H_

// Compiled with nothing on the include path but include/ and Abseil
// (api/CMakeLists.txt, include/BUILD.bazel): fails to build if a public
// header includes an engine/, data/, collective/ or proto header.
#include "yoke/yoke.h"

namespace yoke {
// Uses a type of each header, so that each is really parsed.
int HeadersAloneCheck() {
  DataLoaderOptions d;
  DistributedOptions o;
  SgdOptions s;
  AdamOptions a;
  EvalResult e;
  Tensor t;
  return static_cast<int>(d.batch_size + o.world_size + s.lr + a.lr + e.count + t.numel());
}
}  // namespace yoke

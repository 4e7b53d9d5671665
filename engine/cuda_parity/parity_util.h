// Helpers of the GPU-vs-CPU parity tests (engine/cuda_parity/): random host
// data, host<->device copies, NaN poisoning, the error measures and the
// result log that `make gpu-check` turns into its parity table.
//
// A check passes when the device result is finite everywhere and its
// relative L2 error against the CPU engine's result, ||gpu - cpu|| / ||cpu||,
// is at most the bound (0: bit for bit). Every check is appended as one JSON
// line to the file $YOKE_PARITY_LOG names, when it is set.
//
// Test-only code; needs a CUDA device at run time.
#ifndef YOKE_ENGINE_CUDA_PARITY_PARITY_UTIL_H_
#define YOKE_ENGINE_CUDA_PARITY_PARITY_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/kernels/cuda/testing/cuda_test_util.h"
#include "engine/tensor.h"

namespace yoke::engine::parity {

// The parity tests' one device: cuda:0, or the CPU in a self-test run
// (YOKE_PARITY_SELF_TEST=1), which runs every case CPU against CPU so that
// CI checks the cases and the harness on machines without a GPU.
bool SelfTest();
inline Device Gpu() { return SelfTest() ? Device::CPU() : Device::CUDA(0); }
// The precision the device computes at: $YOKE_PARITY_PRECISION, else "fp32".
std::string ParityPrecision();

// A host f32 tensor of `shape` with values uniform in [lo, hi) from `seed`.
Tensor RandomHost(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
// A host i32 tensor of `n` class ids in [0, k).
Tensor RandomLabels(int64_t n, int k, uint64_t seed);

// A device copy of a host tensor, and a host copy of a device tensor (both
// abort on a device error: tests).
Tensor ToDevice(const Tensor& host);
Tensor ToHost(const Tensor& device);
// An f32 tensor on the device, every element NaN (so an element a kernel
// never writes shows up).
Tensor NanDevice(const Shape& shape);

struct Measure {
  double rel_l2 = 0;   // ||got - want|| / max(||want||, tiny)
  double max_abs = 0;  // max |got - want|
  int64_t nonfinite = 0;
  int64_t bitwise_diffs = 0;  // elements whose bits differ
};
// got and want: host f32 tensors of the same element count.
Measure Compare(const Tensor& got, const Tensor& want);

// Records one check (and returns whether it passed): `op` names the op and
// configuration, `check` the quantity ("forward", "dx0", "dparams",
// "state", "loss", ...), `bound` the relative L2 bound (0 = bitwise).
// YOKE_PARITY_INJECT=<op> makes that op's checks differ (the harness's own
// test proves a difference is reported).
bool Record(const std::string& op, const std::string& check, const Measure& m, double bound);
// Records a measure that is reported, not checked (logged with
// "info": true): how far a chaotic run drifted, say.
void Note(const std::string& op, const std::string& check, const Measure& m);
// Records a count that must be at most `max` (device allocations, host
// waits).
bool RecordCount(const std::string& op, const std::string& check, int64_t value, int64_t max);

}  // namespace yoke::engine::parity

// Skips a parity test without a CUDA device, unless this is a self-test run.
#define SKIP_UNLESS_PARITY_DEVICE()                                      \
  do {                                                                   \
    if (!::yoke::engine::parity::SelfTest()) SKIP_WITHOUT_CUDA_DEVICE(); \
  } while (0)

#endif  // YOKE_ENGINE_CUDA_PARITY_PARITY_UTIL_H_

// The oneDNN engine and stream for CPU kernels.
//
// oneDNN (Debian's build) runs on OpenMP; so do our own element-wise loops, so
// the process has one thread pool and never oversubscribes its cores.
// SetCpuThreads() sizes that pool once, at start-up.
//
// Thread-safety: CpuEngine() is shared; CpuStream() is per calling thread.
#ifndef YOKE_ENGINE_KERNELS_CPU_DNNL_CONTEXT_H_
#define YOKE_ENGINE_KERNELS_CPU_DNNL_CONTEXT_H_

#include "dnnl.hpp"

namespace yoke::engine::cpu {

dnnl::engine& CpuEngine();
dnnl::stream& CpuStream();

// Sets the OpenMP (and so oneDNN) thread count; n <= 0 means all cores.
// Returns the count in effect.
int SetCpuThreads(int n);

}  // namespace yoke::engine::cpu

#endif  // YOKE_ENGINE_KERNELS_CPU_DNNL_CONTEXT_H_

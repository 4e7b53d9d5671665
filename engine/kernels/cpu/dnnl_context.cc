#include "engine/kernels/cpu/dnnl_context.h"

#include <omp.h>

#include <thread>

namespace yoke::engine::cpu {

dnnl::engine& CpuEngine() {
  static dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

dnnl::stream& CpuStream() {
  thread_local dnnl::stream s(CpuEngine());
  return s;
}

int SetCpuThreads(int n) {
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
  omp_set_num_threads(n);
  return n;
}

}  // namespace yoke::engine::cpu

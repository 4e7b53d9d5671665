// YOKE_HD: marks a function for both the host and the device.
//
// The CUDA kernels' per-element work is written as small functors in
// engine/kernels/cuda/math/ headers, which compile with nvcc (as
// __host__ __device__ code run by a kernel, for_each.cuh) and with the host
// compiler alone (run by a plain loop, host_for_each.h). Host tests run the
// very functor a kernel runs and compare it with the CPU engine, so the
// index arithmetic of every kernel is checked on machines without a GPU.
//
// These headers include no CUDA header and allocate nothing.
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_HD_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_HD_H_

#if defined(__CUDACC__)
#define YOKE_HD __host__ __device__
#else
#define YOKE_HD
#endif

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_HD_H_

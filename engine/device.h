// Device: where a tensor lives and where a kernel runs (CPU or CUDA:n).
#ifndef YOKE_ENGINE_DEVICE_H_
#define YOKE_ENGINE_DEVICE_H_

#include <string>

namespace yoke::engine {

struct Device {
  enum class Kind { kCPU, kCUDA };
  Kind kind = Kind::kCPU;
  int index = 0;

  static Device CPU() { return Device{Kind::kCPU, 0}; }
  static Device CUDA(int i) { return Device{Kind::kCUDA, i}; }
  bool is_cpu() const { return kind == Kind::kCPU; }
  bool is_cuda() const { return kind == Kind::kCUDA; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string ToString() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_DEVICE_H_

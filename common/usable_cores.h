#ifndef YOKE_COMMON_USABLE_CORES_H_
#define YOKE_COMMON_USABLE_CORES_H_

namespace yoke::common {

// The CPUs this process may run on: its affinity mask (a container's or a
// cgroup's cpuset, a taskset), else the online CPUs. At least 1.
// Workers report it with their CPU devices; trainers cap training.threads at it.
int UsableCores();

}  // namespace yoke::common

#endif  // YOKE_COMMON_USABLE_CORES_H_

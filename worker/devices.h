// Device discovery for the worker daemon: what this machine can run replicas
// on, as the v1::Device list it registers with the coordinator.
//
// CPU replicas come from configuration (a CPU "device" is a slot for one
// replica, not a core). Each reports as its memory one replica's share of
// the worker's memory limit: the limit over all its replicas, CPU and GPU
// (worker/memory_cgroup.h), which is what a trainer gets per rank. CUDA GPUs are found through the
// CUDA driver API, loaded at run time with dlopen, so the daemon builds and runs on machines
// without CUDA: no driver library, a stub library or a driver that fails to
// initialise all mean "no GPUs", with the reason in `cuda_note`, never a
// crash.
//
// Thread-safety: DiscoverDevices may be called from any thread; it keeps no
// state (the driver library is closed again before it returns).
#ifndef YOKE_WORKER_DEVICES_H_
#define YOKE_WORKER_DEVICES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/yoke/v1/coordinator.pb.h"

namespace yoke::worker {

struct DeviceOptions {
  // CPU replica slots to offer (kind "cpu", indices 0..n-1); 0 offers none.
  int cpu_replicas = 1;
  // The memory all the worker's trainers may use (--memory-limit); 0: the
  // machine's physical memory.
  int64_t memory_limit_bytes = 0;
  // Look for CUDA GPUs at all.
  bool discover_cuda = true;
  // The CUDA driver library to dlopen; tests point this at a stub or a path
  // that does not exist.
  std::string cuda_driver_library = "libcuda.so.1";
};

struct DeviceInventory {
  // CPU replicas first, then CUDA devices in driver order.
  std::vector<v1::Device> devices;
  // Why there are no CUDA devices ("cannot load libcuda.so.1: ...",
  // "cuInit failed: CUDA_ERROR_NO_DEVICE (100)"), or a summary when there
  // are ("2 CUDA devices via libcuda.so.1").
  std::string cuda_note;
  // One replica's share of the memory limit (what CPU devices report).
  int64_t replica_memory_bytes = 0;
};

// Discovers the devices as `options` say. Never fails: a broken CUDA setup
// yields CPU devices only, with the reason in cuda_note.
DeviceInventory DiscoverDevices(const DeviceOptions& options);

// Counts of `kind` ("cpu", "cuda") in `devices`.
int CountDevices(const std::vector<v1::Device>& devices, const std::string& kind);

}  // namespace yoke::worker

#endif  // YOKE_WORKER_DEVICES_H_

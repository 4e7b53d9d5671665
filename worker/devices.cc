#include "worker/devices.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "common/usable_cores.h"
#include "worker/memory_cgroup.h"

namespace yoke::worker {
namespace {

// The few driver API entry points we need, declared by hand with the ABI's
// plain types (CUresult and CUdevice are ints) so no CUDA header is needed.
// The driver API is used rather than the runtime because its signatures do
// not depend on the toolkit version (cudaDeviceProp's layout does).
using CuInit = int (*)(unsigned int);
using CuDeviceGetCount = int (*)(int*);
using CuDeviceGet = int (*)(int*, int);
using CuDeviceGetName = int (*)(char*, int, int);
using CuDeviceTotalMem = int (*)(size_t*, int);
using CuDeviceGetAttribute = int (*)(int*, int, int);
using CuGetErrorName = int (*)(int, const char**);

constexpr int kAttrComputeCapabilityMajor = 75;
constexpr int kAttrComputeCapabilityMinor = 76;

class DriverLibrary {
 public:
  explicit DriverLibrary(const std::string& name)
      : handle_(::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {}
  ~DriverLibrary() {
    if (handle_) ::dlclose(handle_);
  }
  DriverLibrary(const DriverLibrary&) = delete;
  DriverLibrary& operator=(const DriverLibrary&) = delete;

  bool loaded() const { return handle_ != nullptr; }
  template <typename Fn>
  Fn Get(const char* symbol) const {
    return reinterpret_cast<Fn>(::dlsym(handle_, symbol));
  }

 private:
  void* handle_;
};

int64_t PhysicalMemoryBytes() {
  long pages = ::sysconf(_SC_PHYS_PAGES);
  long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<int64_t>(pages) * page_size;
}

// Appends the CUDA devices the driver at `library` reports; returns the note
// for DeviceInventory::cuda_note.
std::string DiscoverCuda(const std::string& library, std::vector<v1::Device>* out) {
  DriverLibrary lib(library);
  if (!lib.loaded()) {
    const char* err = ::dlerror();
    return absl::StrCat("no CUDA driver: cannot load ", library, ": ", err ? err : "unknown error");
  }
  auto init = lib.Get<CuInit>("cuInit");
  auto get_count = lib.Get<CuDeviceGetCount>("cuDeviceGetCount");
  auto get = lib.Get<CuDeviceGet>("cuDeviceGet");
  auto get_name = lib.Get<CuDeviceGetName>("cuDeviceGetName");
  auto total_mem = lib.Get<CuDeviceTotalMem>("cuDeviceTotalMem_v2");
  auto get_attr = lib.Get<CuDeviceGetAttribute>("cuDeviceGetAttribute");
  auto error_name = lib.Get<CuGetErrorName>("cuGetErrorName");
  if (!init || !get_count || !get || !get_name || !total_mem || !get_attr) {
    return absl::StrCat("no CUDA devices: ", library,
                        " lacks a driver API entry point (cuInit, cuDeviceGetCount, "
                        "cuDeviceGet, cuDeviceGetName, cuDeviceTotalMem_v2, "
                        "cuDeviceGetAttribute)");
  }
  auto describe = [&](int code) {
    const char* name = nullptr;
    if (error_name && error_name(code, &name) == 0 && name) {
      return absl::StrCat(name, " (", code, ")");
    }
    return absl::StrCat("error ", code);
  };
  if (int rc = init(0); rc != 0) {
    return absl::StrCat("no CUDA devices: cuInit failed: ", describe(rc));
  }
  int count = 0;
  if (int rc = get_count(&count); rc != 0) {
    return absl::StrCat("no CUDA devices: cuDeviceGetCount failed: ", describe(rc));
  }
  int found = 0;
  std::string skipped;
  for (int i = 0; i < count; ++i) {
    int dev = 0;
    char name[256] = {0};
    size_t bytes = 0;
    int major = 0, minor = 0;
    int rc = get(&dev, i);
    if (rc == 0) rc = get_name(name, sizeof(name) - 1, dev);
    if (rc == 0) rc = total_mem(&bytes, dev);
    if (rc == 0) rc = get_attr(&major, kAttrComputeCapabilityMajor, dev);
    if (rc == 0) rc = get_attr(&minor, kAttrComputeCapabilityMinor, dev);
    if (rc != 0) {
      // A device that cannot be queried cannot be trusted to train on.
      absl::StrAppend(&skipped, "; device ", i, " skipped: ", describe(rc));
      continue;
    }
    v1::Device d;
    d.set_kind("cuda");
    d.set_index(i);
    d.set_name(name);
    d.set_memory_bytes(static_cast<int64_t>(bytes));
    d.set_compute_capability(absl::StrCat(major, ".", minor));
    out->push_back(std::move(d));
    ++found;
  }
  return absl::StrCat(found, " CUDA device", found == 1 ? "" : "s", " via ", library, skipped);
}

}  // namespace

DeviceInventory DiscoverDevices(const DeviceOptions& options) {
  DeviceInventory inv;
  std::vector<v1::Device> gpus;
  inv.cuda_note = options.discover_cuda ? DiscoverCuda(options.cuda_driver_library, &gpus)
                                        : "CUDA discovery disabled";
  const int64_t limit =
      options.memory_limit_bytes > 0 ? options.memory_limit_bytes : PhysicalMemoryBytes();
  const int replicas = std::max(options.cpu_replicas, 0) + static_cast<int>(gpus.size());
  inv.replica_memory_bytes = ReplicaShare(limit, replicas);
  const int cores = common::UsableCores();
  for (int i = 0; i < options.cpu_replicas; ++i) {
    v1::Device d;
    d.set_kind("cpu");
    d.set_index(i);
    d.set_name("cpu replica");
    // What the trainer of this replica gets, not the whole machine: the
    // coordinator checks a job's estimate against it.
    d.set_memory_bytes(inv.replica_memory_bytes);
    d.set_cores(cores);
    inv.devices.push_back(std::move(d));
  }
  for (v1::Device& g : gpus) inv.devices.push_back(std::move(g));
  return inv;
}

int CountDevices(const std::vector<v1::Device>& devices, const std::string& kind) {
  int n = 0;
  for (const v1::Device& d : devices) n += d.kind() == kind;
  return n;
}

}  // namespace yoke::worker

#include "worker/devices.h"

#include <dlfcn.h>
#include <unistd.h>

#include <regex>

#include "common/usable_cores.h"
#include "gtest/gtest.h"

namespace yoke::worker {
namespace {

TEST(DevicesTest, CpuReplicasComeFromOptions) {
  DeviceOptions o;
  o.cpu_replicas = 3;
  o.discover_cuda = false;
  DeviceInventory inv = DiscoverDevices(o);
  ASSERT_EQ(inv.devices.size(), 3u);
  // No limit given: the machine's memory, shared by the three.
  const int64_t host_memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(inv.devices[i].kind(), "cpu");
    EXPECT_EQ(inv.devices[i].index(), i);
    EXPECT_EQ(inv.devices[i].memory_bytes(), host_memory / 3);
    EXPECT_EQ(inv.devices[i].cores(), common::UsableCores());
  }
  EXPECT_EQ(CountDevices(inv.devices, "cpu"), 3);
  EXPECT_EQ(CountDevices(inv.devices, "cuda"), 0);
  EXPECT_EQ(inv.cuda_note, "CUDA discovery disabled");
}

TEST(DevicesTest, EachCpuReplicaReportsItsShareOfTheMemoryLimit) {
  DeviceOptions o;
  o.cpu_replicas = 3;
  o.discover_cuda = false;
  o.memory_limit_bytes = int64_t{12} << 30;
  DeviceInventory inv = DiscoverDevices(o);
  ASSERT_EQ(inv.devices.size(), 3u);
  EXPECT_EQ(inv.replica_memory_bytes, int64_t{4} << 30);
  for (const v1::Device& d : inv.devices) EXPECT_EQ(d.memory_bytes(), int64_t{4} << 30);
  o.cpu_replicas = 1;
  inv = DiscoverDevices(o);
  ASSERT_EQ(inv.devices.size(), 1u);
  EXPECT_EQ(inv.devices[0].memory_bytes(), int64_t{12} << 30);
}

TEST(DevicesTest, ZeroCpuReplicasOffersNone) {
  DeviceOptions o;
  o.cpu_replicas = 0;
  o.cuda_driver_library = "/nonexistent/libcuda.so.1";
  EXPECT_TRUE(DiscoverDevices(o).devices.empty());
}

TEST(DevicesTest, MissingDriverMeansNoGpusAndSaysWhy) {
  DeviceOptions o;
  o.cpu_replicas = 2;
  o.cuda_driver_library = "/nonexistent/libcuda.so.1";
  DeviceInventory inv = DiscoverDevices(o);
  EXPECT_EQ(CountDevices(inv.devices, "cpu"), 2);
  EXPECT_EQ(CountDevices(inv.devices, "cuda"), 0);
  EXPECT_NE(inv.cuda_note.find("cannot load /nonexistent/libcuda.so.1"), std::string::npos)
      << inv.cuda_note;
}

// The toolkit's link stub exports every driver entry point but fails cuInit:
// the path a machine with the toolkit and no driver takes.
TEST(DevicesTest, StubDriverMeansNoGpusAndSaysWhy) {
  const char* stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (access(stub, R_OK) != 0) GTEST_SKIP() << "no CUDA stub library at " << stub;
  DeviceOptions o;
  o.cuda_driver_library = stub;
  DeviceInventory inv = DiscoverDevices(o);
  EXPECT_EQ(CountDevices(inv.devices, "cpu"), 1);
  EXPECT_EQ(CountDevices(inv.devices, "cuda"), 0);
  EXPECT_NE(inv.cuda_note.find("cuInit failed"), std::string::npos) << inv.cuda_note;
}

// The real driver, whatever this machine has: no GPU (or no driver) must give
// CPU replicas only, without crashing; a GPU must be described fully.
TEST(DevicesTest, RealDriverIfAny) {
  DeviceOptions o;
  o.cpu_replicas = 1;
  DeviceInventory inv = DiscoverDevices(o);
  EXPECT_EQ(CountDevices(inv.devices, "cpu"), 1);
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    EXPECT_EQ(CountDevices(inv.devices, "cuda"), 0);
    EXPECT_NE(inv.cuda_note.find("cannot load"), std::string::npos) << inv.cuda_note;
    return;
  }
  dlclose(h);
  std::printf("cuda: %s\n", inv.cuda_note.c_str());
  const std::regex capability("[0-9]+\\.[0-9]+");
  int expected_index = 0;
  for (const v1::Device& d : inv.devices) {
    if (d.kind() != "cuda") continue;
    std::printf("  %d: %s, %lld bytes, sm %s\n", d.index(), d.name().c_str(),
                static_cast<long long>(d.memory_bytes()), d.compute_capability().c_str());
    EXPECT_EQ(d.index(), expected_index++);
    EXPECT_FALSE(d.name().empty());
    EXPECT_GT(d.memory_bytes(), int64_t{1} << 30);  // every supported GPU has > 1 GiB
    EXPECT_TRUE(std::regex_match(d.compute_capability(), capability)) << d.compute_capability();
  }
}

}  // namespace
}  // namespace yoke::worker

// The YAML job-spec loader and the validator on arbitrary text: any input
// must give a spec or an error, never a crash, a hang or a huge allocation.
#include <cstdint>
#include <string>

#include "config/config.h"
#include "jobspec/job_validate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = yoke::common::LoadJobSpecString(text, {}, "fuzz.yaml");
  if (spec.ok()) (void)yoke::common::ValidateJobSpec(*spec);
  return 0;
}

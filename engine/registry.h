// The layer registry: spec name -> factory.
//
// Each layer file registers itself with YOKE_REGISTER_LAYER under the name of
// its LayerSpec oneof field ("dense", "conv2d", ...). The layers library is
// linked whole-archive so that these static registrations are kept.
//
// Thread-safe after static initialisation (lookups only).
#ifndef YOKE_ENGINE_REGISTRY_H_
#define YOKE_ENGINE_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/status.h"
#include "engine/device.h"
#include "engine/layer.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::engine {

// Creates a layer from its spec; returns INVALID_ARGUMENT for bad values.
using LayerFactory = std::function<absl::StatusOr<std::unique_ptr<Layer>>(const v1::LayerSpec&)>;

class LayerRegistry {
 public:
  static LayerRegistry& Global();

  // Registers the implementation of layer `name` for devices of `kind`
  // (the CPU engine's layers, or a device library's). Returns true (for use
  // in static initialisers).
  bool Register(const std::string& name, LayerFactory factory,
                Device::Kind kind = Device::Kind::kCPU);

  // Creates the layer the spec's `kind` names, in its implementation for
  // `device`'s kind. Errors: INVALID_ARGUMENT when no kind is set or when no
  // layer is registered under that name (the message lists the known
  // names); UNIMPLEMENTED when the layer exists but not for that device
  // ("layer 'x' has no cuda implementation in this build").
  absl::StatusOr<std::unique_ptr<Layer>> Create(const v1::LayerSpec& spec,
                                                Device device = Device::CPU()) const;

  // Sorted names registered for `kind`.
  std::vector<std::string> Names(Device::Kind kind = Device::Kind::kCPU) const;

 private:
  struct Entry {
    std::string name;
    Device::Kind kind;
    LayerFactory factory;
  };
  std::vector<Entry> factories_;
};

// The name of the kind a LayerSpec holds ("" when none).
std::string LayerKindName(const v1::LayerSpec& spec);

// OK, or INVALID_ARGUMENT with the first argument rule the spec breaks
// ("conv2d.kernel: must be > 0, got 0"): the rules of engine/shapes/, which
// job validation applies too. Each layer's factory calls it first.
absl::Status CheckArguments(const v1::LayerSpec& spec);

}  // namespace yoke::engine

#define YOKE_REGISTER_LAYER(name, factory)                          \
  static const bool YOKE_CONCAT(yoke_layer_registered_, __LINE__) = \
      ::yoke::engine::LayerRegistry::Global().Register(name, factory)

// The same for a device library's implementation of layer `name`.
#define YOKE_REGISTER_DEVICE_LAYER(name, kind, factory)                    \
  static const bool YOKE_CONCAT(yoke_device_layer_registered_, __LINE__) = \
      ::yoke::engine::LayerRegistry::Global().Register(name, factory, kind)

#endif  // YOKE_ENGINE_REGISTRY_H_

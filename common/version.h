// The version of Yoke, in one place: the CLI prints it (`yoke version`), the
// coordinator reports it (Coordinator.GetVersion), and the Python client
// package (python/) reads this file when it is built, so its version and its
// compatibility bounds are these constants too.
//
// Compatibility is decided by the newer side's bounds: a coordinator serves
// clients from kMinClientVersion on; a client works with coordinators from
// kMinCoordinatorVersion on. A coordinator that predates GetVersion is older
// than every kMinCoordinatorVersion.
//
// Keep the three lines below in this exact form (`name[] = "x.y.z";`):
// python/setup.py parses them.
#ifndef YOKE_COMMON_VERSION_H_
#define YOKE_COMMON_VERSION_H_

namespace yoke::common {

inline constexpr char kYokeVersion[] = "0.1.0";
// The oldest client (the CLI or the Python package) this coordinator serves.
inline constexpr char kMinClientVersion[] = "0.1.0";
// The oldest coordinator a client of this version works with: the first
// with GetVersion and SubmitJobRequest.spec_yaml.
inline constexpr char kMinCoordinatorVersion[] = "0.1.0";

}  // namespace yoke::common

#endif  // YOKE_COMMON_VERSION_H_

// Config loading: YAML -> protobuf message, strictly.
//
// Job files are hand-written, so a typo must fail loudly instead of silently
// falling back to a default. The converter walks the message's descriptor
// (protobuf reflection), so it works for any message type, and rejects:
//   - unknown keys (naming the known ones and the closest match),
//   - duplicate keys in a map,
//   - values of the wrong type or out of range (int32 overflow, a negative
//     uint64, a float beyond float's range, a bool other than true/false,
//     a quoted "5" where a number is expected),
//   - a scalar where a list is expected and vice versa,
//   - two members of the same oneof.
// A scalar where a message with a oneof is expected names the oneof member to
// set to an empty message: `- relu` is short for `- relu: {}`.
//
// Every error is INVALID_ARGUMENT (NOT_FOUND for a missing file) and starts with
// the field path in `model.layers[2].conv2d.kernel` form; the file loaders also
// prefix `file:line:col`.
//
// Code: YAML -> proto and the loaders in config.cc, `--set` overrides in
// config_override.cc, proto -> YAML in config_emit.cc; validating the values
// is job_validate.h's job.
//
// Thread-safety: all functions are pure; safe to call from any thread.
#ifndef YOKE_CONFIG_CONFIG_H_
#define YOKE_CONFIG_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "proto/yoke/v1/job.pb.h"
#include "yaml-cpp/yaml.h"

namespace yoke::common {

// Merges `node` into `*msg` (fields not mentioned keep their values). `path`
// is the field path of `msg` itself, used as the prefix of error messages
// ("" for a root message). A null node leaves `msg` unchanged. Returns
// INVALID_ARGUMENT naming the offending field path; `msg` may then be
// partially filled.
absl::Status YamlToProto(const YAML::Node& node, google::protobuf::Message* msg,
                         const std::string& path);

// Applies one `--set` override, `path=value`, to the YAML document `*root`.
// `path` is dotted field names with list indices (`model.layers[0].dense.units`);
// missing maps along the way are created, but a list index must already exist.
// `value` is parsed as YAML (`[0.5]`, `{units: 3}`, `relu`); an empty value is
// the empty string. A null value (`null`, `~`) on a field name clears that
// field when the document is converted (a scalar, a message or a list alike:
// as if the document never set it; its name is still checked, and clearing
// inside an absent message does not create it); on a list item it is a plain
// null. Returns INVALID_ARGUMENT quoting the override on a malformed path, a
// YAML error in the value, an index past the end of a list, or a path that
// runs through a scalar.
absl::Status ApplyOverride(const std::string& override_text, YAML::Node* root);

// Parses `yaml_text`, applies `overrides` in order, then converts the result to
// a JobSpec. `source_name` (e.g. the file name) prefixes error positions:
// "job.yaml:7:15: training.batch_size: expected an integer, got 'sixty-four'".
// Does not validate the values; see job_validate.h.
absl::StatusOr<v1::JobSpec> LoadJobSpecString(const std::string& yaml_text,
                                              const std::vector<std::string>& overrides,
                                              const std::string& source_name = "<string>");

// Reads the file at `path`, then as LoadJobSpecString. NOT_FOUND naming the
// path if it cannot be opened.
absl::StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path,
                                            const std::vector<std::string>& overrides);

// Emits the fields of `msg` that are set (proto3: non-default) as block YAML
// that YamlToProto reads back to an equal message. Floats keep enough digits
// to round-trip exactly.
std::string ProtoToYaml(const google::protobuf::Message& msg);
std::string JobSpecToYaml(const v1::JobSpec& spec);

}  // namespace yoke::common

#endif  // YOKE_CONFIG_CONFIG_H_

// The daemons' config files: a yoke.v1.CoordinatorConfig or
// yoke.v1.WorkerConfig written in YAML, read strictly (unknown keys are
// errors, as for job files; see config.h), and the command-line flags that
// override their fields (ConfigFlags).
//
// Thread-safety: LoadDaemonConfig and GetEnv are safe from any thread; a
// ConfigFlags is not thread-safe (it is used while a main parses its
// arguments).
#ifndef YOKE_CONFIG_DAEMON_CONFIG_H_
#define YOKE_CONFIG_DAEMON_CONFIG_H_

#include <climits>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace yoke::common {

// Merges the YAML file at `path` into `*cfg`. Returns NOT_FOUND
// ("PATH: cannot open config file") when it cannot be read, and
// INVALID_ARGUMENT prefixed with "PATH" (and line:column for a YAML syntax
// error) for a malformed file or a field the message does not have.
absl::Status LoadDaemonConfig(const std::string& path, google::protobuf::Message* cfg);

// The value of an environment variable, "" when it is unset. The daemons
// treat a variable set to "" as unset. Options builders take one of these so
// that tests can give them an environment.
using EnvLookup = std::function<std::string(const char* name)>;
// The process's environment (std::getenv).
std::string GetEnv(const char* name);

// The rule "a flag given on the command line overrides the config file's
// value", written once. Each flag is declared on a FlagParser (with that
// parser's syntax, checks and messages) and bound to a field of the config
// message by name; the values parsed are kept here, since the file is read
// only after parsing (--config is a flag too), and Overlay copies those of
// the flags that were given over the file's.
//
// A flag counts as given when:
//   String: its last value is not empty (`--listen ""` leaves the file's);
//   Strings: it occurred; its values replace the file's whole list;
//   Switch: it is true (`--insecure=false` leaves the file's value);
//   Int, Milliseconds, Bytes: it occurred, whatever its value.
// Declaring a field that the message lacks, or of another type, is a
// programming error: it aborts with a message naming the field.
//
// A ConfigFlags must outlive the parser's Parse and must not move (the
// parser holds pointers into it).
class ConfigFlags {
 public:
  // `parser` gets the declarations; `config` is the config message's type.
  ConfigFlags(FlagParser* parser, const google::protobuf::Descriptor* config);
  ConfigFlags(const ConfigFlags&) = delete;
  ConfigFlags& operator=(const ConfigFlags&) = delete;

  // A `string` field.
  ConfigFlags& String(absl::string_view names, absl::string_view field);
  // A `repeated string` field; the flag may be repeated.
  ConfigFlags& Strings(absl::string_view names, absl::string_view field);
  // A `bool` field, set by a switch (FlagParser::Bool).
  ConfigFlags& Switch(absl::string_view names, absl::string_view field);
  // An `int32` field, in [min, max] (FlagParser::Int).
  ConfigFlags& Int(absl::string_view names, absl::string_view field, int min, int max = INT_MAX);
  // An `int64` field of milliseconds, from a duration of at least `min`
  // (FlagParser::Duration, with `what` for its message).
  ConfigFlags& Milliseconds(absl::string_view names, absl::string_view field, absl::Duration min,
                            absl::string_view what);

  // An `int64` field of bytes, from a size of at least `min`
  // (FlagParser::Bytes, with `what` for its message).
  ConfigFlags& Bytes(absl::string_view names, absl::string_view field, int64_t min,
                     absl::string_view what);

  // True when the flag bound to `field` was given (see above); false for a
  // field no flag is bound to.
  bool Given(absl::string_view field) const;

  // Sets each field of `cfg` whose flag was given to the flag's value. `cfg`
  // must be of the type given to the constructor.
  void Overlay(google::protobuf::Message* cfg) const;

 private:
  enum class Kind { kString, kStrings, kSwitch, kInt, kMilliseconds, kBytes };
  struct Binding {
    const google::protobuf::FieldDescriptor* field = nullptr;
    Kind kind = Kind::kString;
    std::string text;
    std::vector<std::string> texts;
    bool on = false;
    int number = 0;
    absl::Duration duration;
    int64_t bytes = 0;
    bool occurred = false;  // for Int, Milliseconds and Bytes (FlagParser::Track)
  };
  Binding& Bind(absl::string_view field, Kind kind);
  static bool IsGiven(const Binding& b);

  FlagParser* parser_;
  const google::protobuf::Descriptor* config_;
  std::deque<Binding> bindings_;  // a deque: the parser keeps pointers into it
};

}  // namespace yoke::common

#endif  // YOKE_CONFIG_DAEMON_CONFIG_H_

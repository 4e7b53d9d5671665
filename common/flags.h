// The command-line parser of every Yoke program: `yoke` and its
// subcommands, yoke-coordinator, yoke-worker and yoke-trainer.
//
// A program declares its flags on a FlagParser, each bound to a variable,
// then parses its arguments. Values are converted with absl flags'
// marshalling (absl::ParseFlag), so "--port=x" and "--detach=maybe" fail the
// way absl flags fail. absl's own ABSL_FLAG registry is not used: its flags
// are process-wide, so the subcommands of `yoke` could not each accept only
// their own flags, and a repeated flag would replace its value where
// `--set a=1 --set b=2` must accumulate.
//
// The rules, the same in every program:
//   --flag=value and --flag value both work; a flag that takes a value takes
//     the next argument whatever it looks like ("--priority -1").
//   A flag declared with Strings() accumulates; others keep the last value.
//   A Bool() flag takes no separate value: "--detach", or "--detach=false".
//   --help or -h asks for the usage (Parse stops there).
//   "--" ends the flags: what follows is positional.
//   Any other argument starting with '-' (except "-" itself) is a flag, and
//     one not declared is an error: "unknown flag '--bogus'".
//   Other arguments are positional, returned in order.
// ParseOrExitCode adds the shared handling: --help prints the usage on
// stdout (exit 0); an error prints "PROGRAM: MESSAGE" and the usage on
// stderr (exit 2).
//
// Thread-safety: a FlagParser is not thread-safe; Parse is const but writes
// the bound variables.
#ifndef YOKE_COMMON_FLAGS_H_
#define YOKE_COMMON_FLAGS_H_

#include <climits>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace yoke::common {

// What Parse found besides the flag values it stored.
struct ParsedArgs {
  bool help = false;                    // --help or -h was given
  std::vector<std::string> positional;  // the non-flag arguments, in order
};

class FlagParser {
 public:
  // Sets a flag from its value; returns INVALID_ARGUMENT with the message to
  // show (which should name the flag) when the value is wrong.
  using Setter = std::function<absl::Status(const std::string& value)>;

  // `program` starts error messages ("yoke submit", "yoke-worker"); `usage`
  // is the text --help prints and errors end with (newline-terminated).
  FlagParser(std::string program, std::string usage);

  // Each declaration takes `names`, one or more comma-separated spellings
  // ("--output,-o"); the first is the one messages use. Declaring a name
  // twice is a programming error (the later declaration wins).

  // A string: the last occurrence wins.
  FlagParser& String(absl::string_view names, std::string* dst);
  // A repeated string: every occurrence is appended to `dst`, in order.
  FlagParser& Strings(absl::string_view names, std::vector<std::string>* dst);
  // A switch: present means true; "--name=false" sets false.
  FlagParser& Bool(absl::string_view names, bool* dst);
  // An integer in [min, max]; otherwise
  // "NAME: expected an integer >= MIN, got 'VALUE'" (or "in [MIN, MAX]",
  // "<= MAX", or no range when neither bound is set).
  FlagParser& Int(absl::string_view names, int* dst, int min = INT_MIN, int max = INT_MAX);
  // A duration (ParseDurationFlag) of at least `min`; otherwise
  // "NAME: expected WHAT, got 'VALUE'", where `what` describes the accepted
  // values ("a duration > 0 such as 10s").
  FlagParser& Duration(absl::string_view names, absl::Duration* dst, absl::Duration min,
                       absl::string_view what);
  // A size in bytes (ParseByteSizeFlag) of at least `min`; otherwise
  // "NAME: expected WHAT, got 'VALUE'" ("a size of at least 1MiB such as
  // 8GiB").
  FlagParser& Bytes(absl::string_view names, int64_t* dst, int64_t min, absl::string_view what);
  // Anything else: `set` converts and checks the value.
  FlagParser& Custom(absl::string_view names, Setter set);
  // Sets `*given` to true each time the flag declared last gets a valid
  // value (so "given" need not be told from a default value). Declaring no
  // flag before it is a programming error.
  FlagParser& Track(bool* given);

  // Parses `args` (the arguments after the program or subcommand name) into
  // the bound variables. Returns the positional arguments and whether help
  // was asked for, or INVALID_ARGUMENT: "unknown flag 'NAME'", "NAME needs a
  // value", or a value error.
  absl::StatusOr<ParsedArgs> Parse(const std::vector<std::string>& args) const;

  // Parse with the shared reporting: on --help writes the usage to `out` and
  // returns 0; on an error writes "PROGRAM: MESSAGE\n" and the usage to
  // `err` and returns 2; on success stores the positionals in `positional`
  // and returns nullopt (go on).
  std::optional<int> ParseOrExitCode(const std::vector<std::string>& args,
                                     std::vector<std::string>* positional, FILE* out = stdout,
                                     FILE* err = stderr) const;

  // Reports a usage error found after parsing (a missing or extra
  // positional): writes "PROGRAM: MESSAGE\n" and the usage to `err`;
  // returns 2, the exit code for it.
  int UsageError(FILE* err, absl::string_view message) const;

  const std::string& program() const { return program_; }
  const std::string& usage() const { return usage_; }

 private:
  struct Flag {
    std::vector<std::string> names;
    bool takes_value = true;  // false for Bool
    Setter set;
  };
  FlagParser& Add(absl::string_view names, bool takes_value, Setter set);
  const Flag* Find(absl::string_view name) const;

  std::string program_;
  std::string usage_;
  std::vector<Flag> flags_;
};

// argv[1..argc) as strings.
std::vector<std::string> ArgsOf(int argc, char** argv);

// A duration flag value: "10s", "250ms", "1m30s" (absl::ParseDuration) or a
// plain number of milliseconds. Returns false when malformed or negative.
bool ParseDurationFlag(absl::string_view text, absl::Duration* out);

// A size flag value: a plain number of bytes ("1073741824"), or a number
// (decimals allowed) and a unit: KiB, MiB, GiB, TiB (powers of 1024; K, M,
// G, T alone mean the same), or kB, MB, GB, TB (powers of 1000). Units are
// case-insensitive; a space may come before the unit. Returns false when
// malformed, negative, fractional in bytes, or over INT64_MAX.
bool ParseByteSizeFlag(absl::string_view text, int64_t* out);

}  // namespace yoke::common

#endif  // YOKE_COMMON_FLAGS_H_

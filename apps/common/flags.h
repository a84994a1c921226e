// The command-line machinery of ddp-train, its make-data and ddprun: one table of flags (name,
// value, help, setter, getter) per program, from which parsing, validation, --help and the
// configuration text are all made, so none of them can drift from the others.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <c10/util/StringUtil.h>

#include "ddp/elastic/cpu_binding.h"
#include "ddp/error.h"

namespace ddp::cli {

/// `text` as a double in [min, max]; otherwise InvalidArgument naming `flag`.
double parse_double(const std::string& flag, const std::string& text, double min, double max);

/// `text` as an integer in [min, max]; otherwise InvalidArgument naming `flag`.
int64_t parse_int64(const std::string& flag, const std::string& text, int64_t min, int64_t max);

/// The shortest text that reads back as the same double (0.05, not 0.050000000000000003).
std::string number_text(double value);

/// "a, b or c".
std::string or_list(const std::vector<std::string>& words);

/// The names of a closed choice (an enum), in the order --help lists them.
template <class E>
using Names = std::vector<std::pair<E, std::string>>;

/// --cpu-bind's names (ddprun and ddp-train), as Slurm's srun --cpu-bind spells them.
inline const Names<CpuBind> kCpuBindNames = {{CpuBind::kNone, "none"}, {CpuBind::kCores, "cores"}};

/// The help text of --cpu-bind.
inline constexpr const char* kCpuBindHelp =
    "none (default): the kernel places the workers; cores: each local rank runs only on its own "
    "equal share of the CPUs this launcher may use (4 workers on 2 CPUs: two per CPU), and "
    "ddp-train takes one thread per CPU of its share. Faster where workers outnumber cores; do "
    "not bind two jobs on one machine";

/// The enum value named `text`; otherwise "FLAG: unknown WHAT 'text'; use a, b or c".
template <class E>
E parse_choice(const std::string& flag, const std::string& what, const std::string& text,
               const Names<E>& names) {
  std::vector<std::string> words;
  for (const auto& [value, name] : names) {
    if (name == text) return value;
    words.push_back(name);
  }
  throw InvalidArgument(c10::str(flag, ": unknown ", what, " '", text, "'; use ", or_list(words)));
}

/// The name of `value` in `names` (every value has one).
template <class E>
const std::string& choice_name(E value, const Names<E>& names) {
  for (const auto& [v, name] : names) {
    if (v == value) return name;
  }
  return names.front().second;  // unreachable for a complete table
}

/// What a flag's value looks like in a configuration text.
enum class ValueKind { kSwitch, kText, kNumber };

/// One flag of a program whose options are an `Options`.
template <class Options>
struct Flag {
  std::string name;   // "--batch-size"
  std::string value;  // what --help shows for its value ("N"); empty: a switch, no value
  std::string help;
  std::function<void(Options&, const std::string&)> set;  // validates; throws InvalidArgument
  // The current value as the command line would give it ("true"/"false" for a switch); empty
  // function: not part of the configuration (--config itself, --help).
  std::function<std::string(const Options&)> get = nullptr;
  ValueKind kind = ValueKind::kText;
};

/// Splits "--name=value"; `has_value` says whether there was an '='.
void split_assignment(std::string& name, std::string& value, bool& has_value);

/// The help lines of a table: the flag and its value, then the help, aligned at column 28.
std::string help_line(const std::string& flag, const std::string& value, const std::string& help);

/// How a parser treats what is not a flag.
enum class Positional {
  kRefuse,  // every argument is a flag (ddp-train)
  kStop,    // the first non-flag, or what follows "--", is a program's command line (ddprun)
};

/// A program's flags, parsed into an `Options`.
template <class Options>
class FlagTable {
 public:
  /// `program` names the program in messages ("ddp-train", "make-data"). With
  /// `underscores_as_dashes`, '_' in a flag's name reads as '-' (torchrun's --nproc_per_node).
  FlagTable(std::string program, std::vector<Flag<Options>> flags,
            bool underscores_as_dashes = false)
      : program_(std::move(program)),
        flags_(std::move(flags)),
        underscores_(underscores_as_dashes) {}

  const std::vector<Flag<Options>>& flags() const { return flags_; }

  /// The flag called `name`, or nullptr.
  const Flag<Options>* find(const std::string& name) const {
    for (const auto& f : flags_) {
      if (f.name == name) return &f;
    }
    return nullptr;
  }

  /// Applies `args` to `options` in order (a later flag overrides an earlier one). Returns the
  /// index of the first argument not consumed (args.size() with Positional::kRefuse). Sets `help`
  /// and returns early on --help or -h.
  size_t parse(const std::vector<std::string>& args, Options& options, bool& help,
               Positional positional = Positional::kRefuse) const {
    help = false;
    for (size_t i = 0; i < args.size(); ++i) {
      std::string name = args[i], value;
      if (positional == Positional::kStop && name == "--") return i + 1;
      if (positional == Positional::kStop && name.rfind("--", 0) != 0) return i;
      bool has_value = false;
      split_assignment(name, value, has_value);
      if (underscores_) std::replace(name.begin(), name.end(), '_', '-');
      if (name == "--help" || name == "-h") {
        help = true;
        return i;
      }
      const Flag<Options>* flag = find(name);
      if (flag == nullptr) {
        throw InvalidArgument(
            c10::str("unknown argument '", args[i], "'; see ", program_, " --help"));
      }
      if (flag->value.empty()) {
        if (has_value) throw InvalidArgument(c10::str(name, " takes no value"));
      } else if (!has_value) {
        if (i + 1 >= args.size()) {
          throw InvalidArgument(c10::str(name, " needs a value (", flag->value, ")"));
        }
        value = args[++i];
      }
      set(*flag, options, value);
    }
    return args.size();
  }

  /// Sets `flag`'s value. An error that does not name the flag (the library's own words, which
  /// know nothing of command lines) gets the flag's name in front.
  static void set(const Flag<Options>& flag, Options& options, const std::string& value) {
    try {
      flag.set(options, value);
    } catch (const InvalidArgument& e) {
      const std::string message = e.what();
      if (message.rfind(flag.name, 0) == 0) throw;
      throw InvalidArgument(c10::str(flag.name, ": ", message));
    }
  }

  /// The flags' part of --help, one flag a line (or two), and --help itself.
  std::string help() const {
    std::string out;
    for (const auto& f : flags_) out += help_line(f.name, f.value, f.help);
    return out + help_line("--help", "", "show this text");
  }

  /// Every configuration flag's current value as TOML, "key = value" a line, keys the flags'
  /// names without dashes (batch_size): what --config reads back to the same options. With
  /// `only_changed`, the flags whose value differs from a default-constructed Options only.
  std::string toml(const Options& options, bool only_changed = false) const {
    const Options defaults{};
    std::string out;
    for (const auto& f : flags_) {
      if (!f.get || (only_changed && f.get(options) == f.get(defaults))) continue;
      std::string key = f.name.substr(2);
      std::replace(key.begin(), key.end(), '-', '_');
      const std::string value = f.get(options);
      out += key + " = " + (f.kind == ValueKind::kText ? quoted(value) : value) + "\n";
    }
    return out;
  }

  /// A TOML basic string: the text in double quotes, with '"' and '\' escaped.
  static std::string quoted(const std::string& text) {
    std::string out = "\"";
    for (char c : text) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out + "\"";
  }

 private:
  std::string program_;
  std::vector<Flag<Options>> flags_;
  bool underscores_ = false;
};

// The helpers below take `field` as a data member pointer (&Options::epochs) or as a callable
// that returns a reference to the value (for TORCH_ARG options: [](auto& o) -> decltype(auto) {
// return (o.nnodes()); }, see DDP_CLI_FIELD).

/// The type a field holds.
template <class Options, class Field>
using FieldType =
    std::remove_cv_t<std::remove_reference_t<std::invoke_result_t<const Field&, Options&>>>;

/// A switch: no value; `field` becomes true when it is given.
template <class Options, class Field>
Flag<Options> switch_flag(std::string name, std::string help, Field field) {
  return {
      std::move(name),
      "",
      std::move(help),
      [field](Options& o, const std::string&) { std::invoke(field, o) = true; },
      [field](const Options& o) { return std::string(std::invoke(field, o) ? "true" : "false"); },
      ValueKind::kSwitch};
}

/// A flag whose value is any text, kept as it is.
template <class Options, class Field>
Flag<Options> text_flag(std::string name, std::string value, std::string help, Field field) {
  return {std::move(name),
          std::move(value),
          std::move(help),
          [field](Options& o, const std::string& v) { std::invoke(field, o) = v; },
          [field](const Options& o) { return std::string(std::invoke(field, o)); },
          ValueKind::kText};
}

/// An integer flag with a range, named in the message when the value is outside it.
template <class Options, class Field>
Flag<Options> int_flag(std::string name, std::string value, std::string help, Field field,
                       int64_t min, int64_t max) {
  using Int = FieldType<Options, Field>;
  const std::string flag = name;
  return {std::move(name),
          std::move(value),
          std::move(help),
          [=](Options& o, const std::string& v) {
            std::invoke(field, o) = Int(parse_int64(flag, v, min, max));
          },
          [field](const Options& o) { return std::to_string(std::invoke(field, o)); },
          ValueKind::kNumber};
}

/// A real-number flag with a range.
template <class Options, class Field>
Flag<Options> real_flag(std::string name, std::string value, std::string help, Field field,
                        double min, double max) {
  const std::string flag = name;
  return {std::move(name),
          std::move(value),
          std::move(help),
          [=](Options& o, const std::string& v) {
            std::invoke(field, o) = parse_double(flag, v, min, max);
          },
          [field](const Options& o) { return number_text(std::invoke(field, o)); },
          ValueKind::kNumber};
}

/// A flag that is one of a closed set of names (an enum).
template <class Options, class Field, class E = FieldType<Options, Field>>
Flag<Options> choice_flag(std::string name, std::string value, std::string help, Field field,
                          std::string what, Names<E> names) {
  const std::string flag = name;
  return {std::move(name),
          std::move(value),
          std::move(help),
          [=](Options& o, const std::string& v) {
            std::invoke(field, o) = parse_choice(flag, what, v, names);
          },
          [=](const Options& o) { return choice_name(std::invoke(field, o), names); },
          ValueKind::kText};
}

}  // namespace ddp::cli

/// A field of TORCH_ARG options for the flag helpers: DDP_CLI_FIELD(nnodes).
#define DDP_CLI_FIELD(name) [](auto& o) -> decltype(auto) { return (o.name()); }

// ddp-train --config FILE.toml: a run's flags in a TOML file. The schema is the flag table itself:
// every key is a flag's name without the dashes (`batch-size = 128`, or `batch_size`), values are
// strings or numbers for flags that take a value and booleans for switches (`no-pad = true`;
// false leaves the switch off). Flags given on the command line come after the file's, so they
// override it.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace ddp::train {

/// How a flag takes its value, for checking a config file against the flag table.
enum class FlagArity { kUnknown, kSwitch, kValue };

/// The command-line flags `path` stands for, in a stable order ("--lr", "0.05", "--no-pad").
/// Throws InvalidArgument naming the file, the line and the key for a syntax error, an unknown
/// key, a value of the wrong type, a key given twice or a nested --config.
std::vector<std::string> flags_from_config_file(
    const std::string& path, const std::function<FlagArity(const std::string&)>& arity);

}  // namespace ddp::train

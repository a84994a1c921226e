// Communication hooks by name: "allreduce", "fp16", "bf16" and "powersgd[:RANK[:START]]" are
// built in, and a program can add its own, so that a name in a configuration file or on a command
// line picks a hook without the caller knowing the hook's class.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/algorithms/comm_hook.h"

namespace ddp {

/// Builds a hook from what follows its name in a spec ("2:100" of "powersgd:2:100", empty when
/// nothing does); throws InvalidArgument for arguments it cannot use.
using CommHookFactory = std::function<std::unique_ptr<CommHook>(const std::string& arguments)>;

/// Makes `name` a hook make_comm_hook() knows (replacing one of that name); the hook itself is
/// installed with DistributedDataParallel::register_comm_hook().
void register_comm_hook_factory(const std::string& name, CommHookFactory factory);

/// The hook `spec` names: NAME or NAME:ARGUMENTS. Throws InvalidArgument naming the spec and the
/// names known.
std::unique_ptr<CommHook> make_comm_hook(const std::string& spec);

/// The names known, built-in ones first.
std::vector<std::string> comm_hook_names();

}  // namespace ddp

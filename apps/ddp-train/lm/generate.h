// ddp-train generate: text sampled from a GPT's weights.
#pragma once

#include <string>
#include <vector>

namespace ddp::train {

/// Runs `ddp-train generate ARGS`; returns the exit code.
int run_generate(const std::vector<std::string>& args);

}  // namespace ddp::train

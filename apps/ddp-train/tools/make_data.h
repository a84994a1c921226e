// ddp-train make-data: writes a synthetic data set with learnable structure, for tests, benches
// and trying ddp-train out without downloading anything.
#pragma once

#include <string>
#include <vector>

namespace ddp::train {

/// Runs the subcommand on its arguments (after "make-data"); returns the exit status.
int run_make_data(const std::vector<std::string>& args);

}  // namespace ddp::train

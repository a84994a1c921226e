// ddp-train plot-trace TRACE.json -o timeline.png: the last steps of a --trace file as a chart,
// every rank's compute and each gradient bucket's all-reduce as bars against time.
#pragma once

#include <string>
#include <vector>

namespace ddp::train {

/// The plot-trace subcommand: `args` are what follows "plot-trace". Returns the exit code.
int run_plot_trace(const std::vector<std::string>& args);

}  // namespace ddp::train

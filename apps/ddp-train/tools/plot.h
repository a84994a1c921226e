// ddp-train plot METRICS.jsonl -o curves.png|svg: the loss (train and test) and the test
// accuracy of a run against epochs, drawn with PLplot (its cairo PNG and its SVG drivers).
#pragma once

#include <string>
#include <vector>

namespace ddp::train {

/// One epoch record of a --metrics file.
struct EpochPoint {
  double epoch = 0, train_loss = 0, test_loss = -1, test_acc = -1;  // -1: not evaluated
};

/// The epoch records of the last run in a --metrics file (a file can hold several runs appended:
/// each begins with its configuration record). Throws IoError / DataError naming the file.
std::vector<EpochPoint> read_epoch_points(const std::string& path);

/// The plot subcommand: `args` are what follows "plot". Returns the exit code.
int run_plot(const std::vector<std::string>& args);

}  // namespace ddp::train

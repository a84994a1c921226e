// ddp-train preview: the first batch of a data set as the model sees it (training: after the
// random augmentation of epoch 1 on one rank; val: the deterministic evaluation pipeline), drawn
// as a grid of images with their class names (PNG through cairo), and optionally written as a
// dict of tensors (images, labels, indices into the data set) for Python's torch.load.
#pragma once

#include <string>
#include <vector>

namespace ddp::train {

/// Runs the subcommand on its arguments (after "preview"); returns the exit status.
int run_preview(const std::vector<std::string>& args);

}  // namespace ddp::train

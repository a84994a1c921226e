// A checkpoint as a value, between gathering its state and writing its file: what the
// background writer (async_checkpoint.h) needs of checkpoint.cpp, not its users.
#pragma once

#include <string>

#include <torch/torch.h>

#include "ddp/checkpoint/checkpoint.h"

namespace ddp {

/// The checkpoint's dict (format tag, model, optimizer state, position), holding the module's
/// and optimizer's own tensors (CPU ones are not copied).
c10::IValue checkpoint_value(const torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                             const CheckpointState& state);

/// Pickles `checkpoint` and writes it to `path` atomically (temporary file, fsync, rename).
void write_checkpoint_value(const std::string& path, const c10::IValue& checkpoint);

}  // namespace ddp

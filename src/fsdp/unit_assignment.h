// Which unit each parameter of a sharded model belongs to, checked: the listed modules
// (bottom-up, so the innermost holds a parameter), the root for the rest. Internal to libddp.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace ddp::fsdp {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

/// The names of `root`'s parameters, tied ones under their first name, in its order.
NamedTensors distinct_parameters(torch::nn::Module& root);

/// Each unit's parameters, the root's last; `names` gets the units' names ("(root)" last).
/// Throws InvalidArgument for a unit outside `root`, listed twice, listed before a unit inside
/// it, or a parameter that a module outside its unit also holds (a weight tied across units,
/// which one gather cannot serve).
std::vector<NamedTensors> assign_parameters(
    torch::nn::Module& root, const std::vector<std::shared_ptr<torch::nn::Module>>& units,
    std::vector<std::string>& names);

/// The one dtype of a unit's parameters (float32 for none); throws InvalidArgument naming
/// `unit` when they mix dtypes (they are gathered in one buffer).
torch::ScalarType dtype_of(const std::string& unit, const NamedTensors& named);

}  // namespace ddp::fsdp

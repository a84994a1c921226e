// Checkpoints and state dicts as values: the model's and the optimizer's state by name, gathered
// into the dict the file holds and put back from it (the file format: pickle_format.cpp; the
// checkpoint folder's names: checkpoint_files.cpp).
#include "ddp/checkpoint/checkpoint.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <c10/util/StringUtil.h>

#include "checkpoint/checkpoint_internal.h"
#include "checkpoint/pickle_format.h"
#include "ddp/atomic_file.h"
#include "ddp/error.h"
#include "torch_compat.h"

namespace ddp {
namespace {

using GenericDict = c10::Dict<c10::IValue, c10::IValue>;
constexpr const char* kFormatName = "ddp.cpp checkpoint";

// Files hold CPU tensors whatever device trained them, so they load anywhere (a GPU run's
// checkpoint on a CPU machine, in Python without map_location).
torch::Tensor for_file(const torch::Tensor& t) { return t.detach().to(torch::kCPU).contiguous(); }

// A tensor from a file as state of `param` (its shape checked): on its device, never sharing
// the file's storage.
torch::Tensor for_param(const torch::Tensor& t, const torch::Tensor& param, const std::string& path,
                        const std::string& name) {
  if (t.sizes() != param.sizes()) {
    throw DataError(c10::str(path, ": optimizer state of ", name, " has shape ", t.sizes(),
                             ", the parameter ", param.sizes()));
  }
  return t.to(param.device(), /*non_blocking=*/false, /*copy=*/true);
}

c10::Dict<std::string, torch::Tensor> state_dict_of(const torch::nn::Module& module) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (const auto& p : module.named_parameters(true)) dict.insert(p.key(), for_file(p.value()));
  for (const auto& b : module.named_buffers(true)) dict.insert(b.key(), for_file(b.value()));
  return dict;
}

std::string shape_string(const torch::Tensor& t) { return c10::str(t.sizes()); }

const c10::IValue& field(const GenericDict& dict, const std::string& key, const std::string& path) {
  auto it = dict.find(key);
  if (it == dict.end())
    throw DataError(c10::str(path, ": checkpoint has no '", key, "' entry; it is damaged"));
  return it->value();
}

// The optimizer's per-parameter state by parameter name, one dict per field, so the file does
// not depend on tensor addresses: SGD's momentum buffers, Adam's moments and step counts.
void save_optimizer_state(GenericDict& dict, const torch::nn::Module& module,
                          torch::optim::Optimizer& optimizer) {
  const bool adam = dynamic_cast<torch::optim::Adam*>(&optimizer) != nullptr;
  if (!adam && dynamic_cast<torch::optim::SGD*>(&optimizer) == nullptr) {
    throw InvalidArgument("save_checkpoint: only SGD and Adam optimizer state can be saved");
  }
  c10::Dict<std::string, torch::Tensor> momentum, exp_avg, exp_avg_sq, max_exp_avg_sq, step;
  auto& states = optimizer.state();
  for (const auto& p : module.named_parameters(true)) {
    auto it = states.find(compat::optimizer_state_key(p.value()));
    if (it == states.end()) continue;
    if (adam) {
      const auto& a = static_cast<const torch::optim::AdamParamState&>(*it->second);
      exp_avg.insert(p.key(), for_file(a.exp_avg()));
      exp_avg_sq.insert(p.key(), for_file(a.exp_avg_sq()));
      if (a.max_exp_avg_sq().defined())
        max_exp_avg_sq.insert(p.key(), for_file(a.max_exp_avg_sq()));
      step.insert(p.key(), torch::tensor(int64_t(a.step()), torch::kLong));
    } else {
      const auto& sgd = static_cast<const torch::optim::SGDParamState&>(*it->second);
      if (sgd.momentum_buffer().defined())
        momentum.insert(p.key(), for_file(sgd.momentum_buffer()));
    }
  }
  dict.insert("optimizer.kind", std::string(adam ? "adam" : "sgd"));
  if (adam) {
    dict.insert("optimizer.exp_avg", exp_avg);
    dict.insert("optimizer.exp_avg_sq", exp_avg_sq);
    dict.insert("optimizer.max_exp_avg_sq", max_exp_avg_sq);
    dict.insert("optimizer.step", step);
  } else {
    dict.insert("optimizer.momentum", momentum);
  }
}

void load_optimizer_state(const GenericDict& dict, const torch::nn::Module& module,
                          torch::optim::Optimizer& optimizer, const std::string& path) {
  auto kind_entry = dict.find("optimizer.kind");  // absent in the first files: SGD
  const std::string kind = kind_entry == dict.end() ? "sgd" : kind_entry->value().toStringRef();
  const bool adam = dynamic_cast<torch::optim::Adam*>(&optimizer) != nullptr;
  if (kind != (adam ? "adam" : "sgd")) {
    throw DataError(c10::str(path, ": the checkpoint holds ", kind,
                             " optimizer state, but the optimizer to load it into is ",
                             adam ? "adam" : "sgd", "; load it into a ", kind, " optimizer"));
  }
  auto& states = optimizer.state();
  if (!adam) {
    const auto momentum =
        tensors_of(field(dict, "optimizer.momentum", path), path, "optimizer state");
    for (const auto& p : module.named_parameters(true)) {
      auto m = momentum.find(p.key());
      if (m == momentum.end()) continue;
      auto fresh = std::make_unique<torch::optim::SGDParamState>();
      fresh->momentum_buffer(for_param(m->second, p.value(), path, p.key()));
      states[compat::optimizer_state_key(p.value())] = std::move(fresh);
    }
    return;
  }
  const auto exp_avg = tensors_of(field(dict, "optimizer.exp_avg", path), path, "exp_avg");
  const auto exp_avg_sq = tensors_of(field(dict, "optimizer.exp_avg_sq", path), path, "exp_avg_sq");
  const auto max_sq =
      tensors_of(field(dict, "optimizer.max_exp_avg_sq", path), path, "max_exp_avg_sq");
  const auto step = tensors_of(field(dict, "optimizer.step", path), path, "step");
  for (const auto& p : module.named_parameters(true)) {
    auto a = exp_avg.find(p.key()), b = exp_avg_sq.find(p.key()), n = step.find(p.key());
    if (a == exp_avg.end() || b == exp_avg_sq.end() || n == step.end()) continue;
    auto fresh = std::make_unique<torch::optim::AdamParamState>();
    fresh->exp_avg(for_param(a->second, p.value(), path, p.key()));
    fresh->exp_avg_sq(for_param(b->second, p.value(), path, p.key()));
    auto m = max_sq.find(p.key());
    if (m != max_sq.end()) fresh->max_exp_avg_sq(for_param(m->second, p.value(), path, p.key()));
    fresh->step(n->second.item<int64_t>());
    states[compat::optimizer_state_key(p.value())] = std::move(fresh);
  }
}

}  // namespace

void save_checkpoint(const std::string& path, const torch::nn::Module& module,
                     torch::optim::Optimizer& optimizer, const CheckpointState& state) {
  write_checkpoint_value(path, checkpoint_value(module, optimizer, state));
}

c10::IValue checkpoint_value(const torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                             const CheckpointState& state) {
  GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("format", std::string(kFormatName));
  dict.insert("version", kCheckpointVersion);
  dict.insert("model", state_dict_of(module));
  save_optimizer_state(dict, module, optimizer);
  dict.insert("epoch", state.epoch);
  dict.insert("step_in_epoch", state.step_in_epoch);
  dict.insert("taken_in_epoch", state.taken_in_epoch);
  dict.insert("earlier_steps_in_epoch", state.earlier_steps_in_epoch);
  dict.insert("global_step", state.global_step);
  dict.insert("world_size", state.world_size);
  dict.insert("config", state.config);
  if (state.rng_state.defined()) dict.insert("rng.torch", state.rng_state);
  return c10::IValue(dict);
}

void write_checkpoint_value(const std::string& path, const c10::IValue& checkpoint) {
  const std::vector<char> bytes = pickle_for_python(checkpoint);
  write_file_atomic(path, bytes.data(), bytes.size());
}

CheckpointState load_checkpoint(const std::string& path, torch::nn::Module& module,
                                torch::optim::Optimizer* optimizer) {
  const c10::IValue root = load_pickle(path);
  if (!root.isGenericDict()) throw DataError(c10::str(path, ": not a ddp.cpp checkpoint"));
  const GenericDict dict = root.toGenericDict();
  auto format = dict.find("format");
  if (format == dict.end() || !format->value().isString() ||
      format->value().toStringRef() != kFormatName) {
    throw DataError(c10::str(path,
                             ": not a ddp.cpp checkpoint (no format tag); a plain state dict "
                             "loads with ddp::read_state_dict and ddp::load_state_dict"));
  }
  const int64_t version = field(dict, "version", path).toInt();
  if (version != kCheckpointVersion) {
    throw DataError(c10::str(path, ": checkpoint format version ", version,
                             ", but this build reads version ", kCheckpointVersion));
  }
  load_state_dict(module, tensors_of(field(dict, "model", path), path, "model"), path);
  if (optimizer != nullptr) load_optimizer_state(dict, module, *optimizer, path);
  CheckpointState state;
  state.epoch = field(dict, "epoch", path).toInt();
  auto step = dict.find("step_in_epoch");  // absent before step checkpoints: an epoch's end
  if (step != dict.end() && step->value().isInt()) state.step_in_epoch = step->value().toInt();
  auto taken = dict.find("taken_in_epoch");  // absent before elastic resumes: 0
  if (taken != dict.end() && taken->value().isInt()) state.taken_in_epoch = taken->value().toInt();
  auto earlier = dict.find("earlier_steps_in_epoch");
  if (earlier != dict.end() && earlier->value().isInt())
    state.earlier_steps_in_epoch = earlier->value().toInt();
  state.global_step = field(dict, "global_step", path).toInt();
  state.world_size = field(dict, "world_size", path).toInt();
  state.config = field(dict, "config", path).toStringRef();
  auto rng = dict.find("rng.torch");
  if (rng != dict.end()) {
    state.rng_state = rng->value().toTensor();
    check_fits_storage(state.rng_state, path, "rng.torch");
  }
  return state;
}

void export_state_dict(const std::string& path, const torch::nn::Module& module) {
  const std::vector<char> bytes = pickle_for_python(c10::IValue(state_dict_of(module)));
  write_file_atomic(path, bytes.data(), bytes.size());
}

void save_tensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (const auto& [name, tensor] : tensors) dict.insert(name, for_file(tensor));
  const std::vector<char> bytes = pickle_for_python(c10::IValue(dict));
  write_file_atomic(path, bytes.data(), bytes.size());
}

std::map<std::string, torch::Tensor> read_state_dict(const std::string& path) {
  const c10::IValue root = load_pickle(path);
  if (root.isGenericDict()) {
    const GenericDict dict = root.toGenericDict();
    auto model = dict.find("model");
    if (dict.find("format") != dict.end() && model != dict.end())
      return tensors_of(model->value(), path, "model");
  }
  return tensors_of(root, path, "the state dict");
}

void load_state_dict(torch::nn::Module& module, const std::map<std::string, torch::Tensor>& state,
                     const std::string& source) {
  std::vector<std::string> problems;
  std::map<std::string, torch::Tensor> targets;
  for (const auto& p : module.named_parameters(true)) targets[p.key()] = p.value();
  for (const auto& b : module.named_buffers(true)) targets[b.key()] = b.value();
  for (const auto& [name, target] : targets) {
    auto it = state.find(name);
    if (it == state.end()) {
      problems.push_back(c10::str("missing ", name, " ", shape_string(target)));
    } else if (it->second.sizes() != target.sizes()) {
      problems.push_back(c10::str(name, " has shape ", shape_string(it->second),
                                  " in the file but ", shape_string(target), " in the model"));
    }
  }
  for (const auto& [name, tensor] : state) {
    if (targets.count(name) == 0)
      problems.push_back(c10::str("unexpected ", name, " ", shape_string(tensor)));
  }
  if (!problems.empty()) {
    std::string list;
    for (const auto& p : problems) list += "\n  " + p;
    throw DataError(
        c10::str(source, " does not fit this model (another architecture or data set?):", list));
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, target] : targets) target.copy_(state.at(name));
}

}  // namespace ddp

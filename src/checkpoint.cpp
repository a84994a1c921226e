#include "ddp/checkpoint.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include "checkpoint_internal.h"
#include "ddp/atomic_file.h"
#include "ddp/error.h"
#include "pickle_guard.h"
#include "python_pickle.h"
#include "torch_compat.h"

namespace ddp {

std::vector<char> python_pickle(const c10::IValue& value, std::vector<at::Tensor>* tensors) {
  std::vector<char> pickled;
  torch::jit::Pickler pickler(
      [&](const char* bytes, size_t size) { pickled.insert(pickled.end(), bytes, bytes + size); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  if (tensors != nullptr) *tensors = pickler.tensorData();
  return pickled;
}
namespace {

using GenericDict = c10::Dict<c10::IValue, c10::IValue>;
constexpr const char* kFormatName = "ddp.cpp checkpoint";

// LibTorch 1.13's unpickler turns collections.OrderedDict into None (it expects one only as a
// tensor's backward hooks) and has no SETITEM, so Python's torch.save(module.state_dict()) —
// an OrderedDict with a _metadata attribute — does not load with torch::pickle_load. This
// rewrites that one, well-known shape of pickle: the OrderedDict constructions become plain
// empty dicts and the trailing BUILD of _metadata is dropped. Returns "" when it is not that
// shape.
std::string rewrite_python_state_dict_pickle(std::string pkl) {
  const std::string head = std::string(
      "\x80\x02"
      "ccollections\nOrderedDict\nq\x00)R",
      31);
  if (pkl.compare(0, head.size(), head) != 0) return "";
  const size_t meta = pkl.rfind(std::string("X\x09\x00\x00\x00_metadata", 14));
  if (meta != std::string::npos) {
    size_t start = std::string::npos;
    if (meta >= 3 && pkl[meta - 3] == '}' && pkl[meta - 2] == 'q') start = meta - 3;
    if (meta >= 6 && pkl[meta - 6] == '}' && pkl[meta - 5] == 'r') start = meta - 6;
    if (start == std::string::npos) return "";
    pkl.resize(start);
    pkl += '.';  // STOP: the dict of tensors is the result
  }
  pkl.replace(2, head.size() - 2, 1, '}');
  const std::string again("h\x00)R", 4);  // BINGET 0 (the OrderedDict class), (), REDUCE
  for (size_t at = pkl.find(again); at != std::string::npos; at = pkl.find(again, at + 1)) {
    pkl.replace(at, again.size(), 1, '}');
  }
  return pkl;
}

// LibTorch 1.13's unpickler sizes each storage by the element count the pickle states, not by
// the record it read from the zip, so a forged count gives a tensor that reads past its buffer
// (found by fuzz/checkpoint_fuzz.cpp: a read of the null page inside copy_ for an empty record).
// `record_bytes` maps each buffer read from the archive to its size; a storage the unpickler
// allocated itself is not in it and is sized right.
void check_storages_fit_records(const c10::IValue& value,
                                const std::map<const void*, size_t>& record_bytes) {
  value.visit([&](const c10::IValue& v) {
    if (!v.isTensor()) return false;  // look inside
    const torch::Tensor& t = v.toTensor();
    if (!t.defined() || !t.has_storage()) return true;
    const auto record = record_bytes.find(t.storage().data_ptr().get());
    if (record != record_bytes.end() && record->second < t.storage().nbytes()) {
      throw Error(concat("a tensor's storage claims ", t.storage().nbytes(),
                         " bytes but its record in the archive holds ", record->second));
    }
    return true;
  });
}

// Unpickles the archive at `path` (a torch.save / pickle_save zip: data.pkl, tensors under
// data/), after `rewrite` of the pickle bytes ("" from it: not readable this way).
// Read from the file, not through torch::pickle_load(bytes): in LibTorch 1.13 that one reads
// the zip through an in-memory adapter without bounds checks, and a forged zip header makes it
// read past the buffer (found by fuzz/checkpoint_fuzz.cpp); the file adapter clamps every read.
c10::IValue unpickle_archive(const std::string& path,
                             const std::function<std::string(std::string)>& rewrite) {
  caffe2::serialize::PyTorchStreamReader zip(path);
  at::DataPtr data;
  size_t size = 0;
  std::tie(data, size) = zip.getRecord("data.pkl");
  const std::string pkl = rewrite(std::string(static_cast<const char*>(data.get()), size));
  if (pkl.empty()) throw Error("not a torch.save'd state_dict");
  const std::string problem = pickle_framing_problem(pkl);
  if (!problem.empty()) throw Error("data.pkl is damaged: " + problem);
  size_t pos = 0;
  std::map<const void*, size_t> record_bytes;
  torch::jit::Unpickler unpickler(
      [&](char* buf, size_t len) {
        const size_t n = std::min(len, pkl.size() - pos);
        std::memcpy(buf, pkl.data() + pos, n);
        pos += n;
        return n;
      },
      nullptr, nullptr,
      [&](const std::string& name) {
        at::DataPtr record;
        size_t record_size = 0;
        std::tie(record, record_size) = zip.getRecord("data/" + name);
        record_bytes[record.get()] = record_size;
        return record;
      },
      c10::nullopt);
  c10::IValue value = unpickler.parse_ivalue();
  check_storages_fit_records(value, record_bytes);
  return value;
}

// Any pickled file: ours (pickle_for_python), or Python's torch.save of a dict or state_dict.
c10::IValue load_pickle(const std::string& path) {
  if (!std::ifstream(path)) throw IoError(concat("cannot open ", path, ": ", std::strerror(errno)));
  try {
    return unpickle_archive(path, [](std::string pkl) { return pkl; });
  } catch (const std::exception& first) {
    try {
      return unpickle_archive(path, rewrite_python_state_dict_pickle);
    } catch (const std::exception&) {
      throw DataError(
          concat(path, ": not a readable checkpoint or state dict (", first_line(first.what()),
                 "); the file is truncated or was not written by ddp.cpp or torch.save"));
    }
  }
}

// A tensor whose sizes and strides reach past its storage (a forged file: the unpickler takes
// them as written) would be read out of bounds; refuse it.
void check_fits_storage(const torch::Tensor& t, const std::string& path, const std::string& name) {
  if (!t.has_storage() || t.numel() == 0) return;
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) < 0) throw DataError(concat(path, ": tensor ", name, " has a negative stride"));
    last += (t.size(d) - 1) * t.stride(d);
  }
  const auto needed = uint64_t(last + 1) * uint64_t(t.element_size());
  if (t.storage_offset() < 0 || needed > t.storage().nbytes()) {
    throw DataError(concat(path, ": tensor ", name, " of shape ", t.sizes(), " needs ", needed,
                           " bytes but its storage holds ", t.storage().nbytes(),
                           "; the file is damaged"));
  }
}

std::map<std::string, torch::Tensor> tensors_of(const c10::IValue& value, const std::string& path,
                                                const std::string& what) {
  if (!value.isGenericDict())
    throw DataError(concat(path, ": ", what, " is not a dict of tensors"));
  std::map<std::string, torch::Tensor> out;
  for (const auto& kv : value.toGenericDict()) {
    if (!kv.key().isString() || !kv.value().isTensor()) {
      throw DataError(concat(path, ": ", what, " holds something other than named tensors"));
    }
    const torch::Tensor& t = kv.value().toTensor();
    check_fits_storage(t, path, kv.key().toStringRef());
    out[kv.key().toStringRef()] = t;
  }
  return out;
}

// torch::pickle_save's zip archive, but with plain dicts: pickle_save tags each typed dict with
// torch.jit._pickle.restore_type_tag, a global that Python's torch.load refuses by default from
// 2.6 on (weights_only=True). Untagged, the file is only dicts, strings, ints and tensors, which
// every torch.load accepts. The same calls exist in LibTorch 1.13 and 2.x.
std::vector<char> pickle_for_python(const c10::IValue& value) {
  std::vector<at::Tensor> tensors;
  const std::vector<char> pickled = python_pickle(value, &tensors);
  std::vector<char> archive;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t size) {
      const char* b = static_cast<const char*>(bytes);
      archive.insert(archive.end(), b, b + size);
      return size;
    });
    torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), tensors, writer);
  }  // the writer's destructor writes the zip's central directory
  return archive;
}

// Files hold CPU tensors whatever device trained them, so they load anywhere (a GPU run's
// checkpoint on a CPU machine, in Python without map_location).
torch::Tensor for_file(const torch::Tensor& t) { return t.detach().to(torch::kCPU).contiguous(); }

// A tensor from a file as state of `param` (its shape checked): on its device, never sharing
// the file's storage.
torch::Tensor for_param(const torch::Tensor& t, const torch::Tensor& param, const std::string& path,
                        const std::string& name) {
  if (t.sizes() != param.sizes()) {
    throw DataError(concat(path, ": optimizer state of ", name, " has shape ", t.sizes(),
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

std::string shape_string(const torch::Tensor& t) { return concat(t.sizes()); }

const c10::IValue& field(const GenericDict& dict, const std::string& key, const std::string& path) {
  auto it = dict.find(key);
  if (it == dict.end())
    throw DataError(concat(path, ": checkpoint has no '", key, "' entry; it is damaged"));
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
    throw DataError(concat(path, ": the checkpoint holds ", kind,
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
  if (!root.isGenericDict()) throw DataError(concat(path, ": not a ddp.cpp checkpoint"));
  const GenericDict dict = root.toGenericDict();
  auto format = dict.find("format");
  if (format == dict.end() || !format->value().isString() ||
      format->value().toStringRef() != kFormatName) {
    throw DataError(concat(path,
                           ": not a ddp.cpp checkpoint (no format tag); a plain state dict "
                           "loads with ddp::read_state_dict and ddp::load_state_dict"));
  }
  const int64_t version = field(dict, "version", path).toInt();
  if (version != kCheckpointVersion) {
    throw DataError(concat(path, ": checkpoint format version ", version,
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
      problems.push_back(concat("missing ", name, " ", shape_string(target)));
    } else if (it->second.sizes() != target.sizes()) {
      problems.push_back(concat(name, " has shape ", shape_string(it->second), " in the file but ",
                                shape_string(target), " in the model"));
    }
  }
  for (const auto& [name, tensor] : state) {
    if (targets.count(name) == 0)
      problems.push_back(concat("unexpected ", name, " ", shape_string(tensor)));
  }
  if (!problems.empty()) {
    std::string list;
    for (const auto& p : problems) list += "\n  " + p;
    throw DataError(
        concat(source, " does not fit this model (another architecture or data set?):", list));
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, target] : targets) target.copy_(state.at(name));
}

std::string checkpoint_path(const std::string& dir, int64_t epoch, int64_t step_in_epoch) {
  char name[80];
  if (step_in_epoch > 0) {
    std::snprintf(name, sizeof name, "checkpoint-epoch-%04lld-step-%08lld.pt",
                  static_cast<long long>(epoch), static_cast<long long>(step_in_epoch));
  } else {
    std::snprintf(name, sizeof name, "checkpoint-epoch-%04lld.pt", static_cast<long long>(epoch));
  }
  return dir + "/" + name;
}

namespace {
// ((epoch, step in the epoch), path) of every finished checkpoint in dir, oldest first;
// temporary files are ignored.
std::vector<std::pair<std::pair<int64_t, int64_t>, std::string>> list_checkpoints(
    const std::string& dir) {
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::string>> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    long long epoch = 0, step = 0;
    char tail[8] = {0};
    const std::string path = dir + "/" + e->d_name;
    if (std::sscanf(e->d_name, "checkpoint-epoch-%lld-step-%lld%7s", &epoch, &step, tail) == 3 &&
        std::strcmp(tail, ".pt") == 0) {
      out.push_back({{epoch, step}, path});
    } else if (std::sscanf(e->d_name, "checkpoint-epoch-%lld%7s", &epoch, tail) == 2 &&
               std::strcmp(tail, ".pt") == 0) {
      out.push_back({{epoch, 0}, path});
    }
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

std::string latest_checkpoint(const std::string& dir) {
  const auto all = list_checkpoints(dir);
  return all.empty() ? "" : all.back().second;
}

void prune_checkpoints(const std::string& dir, int keep) {
  auto all = list_checkpoints(dir);
  for (size_t i = 0; i + size_t(std::max(keep, 1)) < all.size(); ++i)
    ::unlink(all[i].second.c_str());
}

}  // namespace ddp

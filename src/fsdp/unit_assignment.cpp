#include "fsdp/unit_assignment.h"

#include <unordered_map>
#include <unordered_set>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"

namespace ddp::fsdp {

NamedTensors distinct_parameters(torch::nn::Module& root) {
  NamedTensors out;
  std::unordered_set<const void*> seen;
  for (const auto& p : root.named_parameters(true)) {
    if (seen.insert(p.value().unsafeGetTensorImpl()).second) out.emplace_back(p.key(), p.value());
  }
  return out;
}

torch::ScalarType dtype_of(const std::string& unit, const NamedTensors& named) {
  if (named.empty()) return torch::kFloat;
  const torch::ScalarType dtype = named.front().second.scalar_type();
  for (const auto& [name, t] : named) {
    if (t.scalar_type() != dtype) {
      throw InvalidArgument(c10::str("FullyShardedDataParallel: unit ", unit, " mixes ", dtype,
                                     " and ", t.scalar_type(), " (", name,
                                     ") parameters; make it one dtype"));
    }
  }
  return dtype;
}

std::vector<NamedTensors> assign_parameters(
    torch::nn::Module& root, const std::vector<std::shared_ptr<torch::nn::Module>>& units,
    std::vector<std::string>& names) {
  std::unordered_map<const torch::nn::Module*, std::string> module_names;
  for (const auto& m : root.named_modules()) module_names[m.value().get()] = m.key();
  auto fail = [](const std::string& why) {
    throw InvalidArgument("FullyShardedDataParallel: " + why);
  };
  std::unordered_map<const void*, size_t> unit_of;  // TensorImpl → unit
  std::vector<std::unordered_set<const torch::nn::Module*>> inside(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    auto it = units[u] ? module_names.find(units[u].get()) : module_names.end();
    if (it == module_names.end() || units[u].get() == &root) {
      fail(c10::str("unit ", u, " is not a submodule of the module it shards"));
    }
    for (size_t v = 0; v < u; ++v) {
      if (names[v] == it->second) fail(c10::str("unit ", it->second, " is listed twice"));
      if (inside[v].count(units[u].get())) {
        fail(c10::str("unit ", it->second, " is inside unit ", names[v],
                      ", listed before it: list the units bottom-up"));
      }
    }
    for (const auto& m : units[u]->modules()) inside[u].insert(m.get());
    for (const auto& p : units[u]->parameters(true)) unit_of.emplace(p.unsafeGetTensorImpl(), u);
    names.push_back(it->second);
  }
  // A module outside a unit that holds one of its parameters.
  for (const auto& m : root.named_modules()) {
    for (const auto& p : m.value()->named_parameters(/*recurse=*/false)) {
      auto it = unit_of.find(p.value().unsafeGetTensorImpl());
      if (it != unit_of.end() && !inside[it->second].count(m.value().get())) {
        fail(c10::str("parameter ", m.key(), m.key().empty() ? "" : ".", p.key(), " of ",
                      m.key().empty() ? "the root" : m.key(), " is tied to one of unit ",
                      names[it->second],
                      "; a tied weight belongs in the unit that holds all "
                      "its modules (leave the unit out, or shard their common parent)"));
      }
    }
  }
  names.push_back("(root)");
  std::vector<NamedTensors> grouped(names.size());
  for (const auto& [name, p] : distinct_parameters(root)) {
    auto it = unit_of.find(p.unsafeGetTensorImpl());
    grouped[it == unit_of.end() ? units.size() : it->second].emplace_back(name, p);
  }
  return grouped;
}

}  // namespace ddp::fsdp

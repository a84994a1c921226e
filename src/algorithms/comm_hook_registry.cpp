#include "ddp/algorithms/comm_hook_registry.h"

#include <mutex>
#include <utility>

#include <c10/util/StringUtil.h>

#include "ddp/algorithms/powersgd.h"
#include "ddp/error.h"

namespace ddp {
namespace {

using Entry = std::pair<std::string, CommHookFactory>;

// A hook that takes no arguments, under `name`.
template <class Make>
Entry without_arguments(const std::string& name, Make make) {
  return {name, [name, make](const std::string& arguments) -> std::unique_ptr<CommHook> {
            if (!arguments.empty()) {
              throw InvalidArgument(c10::str("comm hook '", name, ":", arguments, "': ", name,
                                             " takes no arguments"));
            }
            return make();
          }};
}

struct Registry {
  std::mutex mutex;
  std::vector<Entry> entries = {
      without_arguments("allreduce", [] { return std::make_unique<AllReduceHook>(); }),
      without_arguments("fp16", [] { return std::make_unique<CastHook>(torch::kHalf); }),
      without_arguments("bf16", [] { return std::make_unique<CastHook>(torch::kBFloat16); }),
      {"powersgd",
       [](const std::string& arguments) {
         return std::make_unique<PowerSGDHook>(powersgd_options_from_spec(arguments));
       }},
  };

  // The entry called `name`, or nullptr; the caller holds `mutex`.
  Entry* find(const std::string& name) {
    for (Entry& entry : entries) {
      if (entry.first == name) return &entry;
    }
    return nullptr;
  }
};

Registry& registry() {
  static Registry instance;
  return instance;
}

}  // namespace

void register_comm_hook_factory(const std::string& name, CommHookFactory factory) {
  if (name.empty() || name.find(':') != std::string::npos) {
    throw InvalidArgument(c10::str("comm hook name '", name, "': must be non-empty, without ':'"));
  }
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  if (Entry* entry = r.find(name)) {
    entry->second = std::move(factory);
  } else {
    r.entries.emplace_back(name, std::move(factory));
  }
}

std::vector<std::string> comm_hook_names() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const Entry& entry : r.entries) names.push_back(entry.first);
  return names;
}

std::unique_ptr<CommHook> make_comm_hook(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  const std::string arguments = colon == std::string::npos ? "" : spec.substr(colon + 1);
  CommHookFactory factory;
  {
    Registry& r = registry();
    const std::lock_guard<std::mutex> lock(r.mutex);
    if (const Entry* entry = r.find(name)) factory = entry->second;
  }
  if (!factory) {
    std::string names;
    for (const auto& n : comm_hook_names()) names += (names.empty() ? "" : ", ") + n;
    throw InvalidArgument(c10::str("unknown communication hook '", spec, "'; choose one of ", names,
                                   " (powersgd[:rank[:start_step]])"));
  }
  return factory(arguments);
}

}  // namespace ddp

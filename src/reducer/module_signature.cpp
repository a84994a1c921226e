#include "reducer/module_signature.h"

#include <algorithm>
#include <string>
#include <vector>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "torch_compat.h"

namespace ddp {
namespace {

std::string describe(const torch::Tensor& t) {
  return c10::str(c10::toString(t.scalar_type()), t.sizes());
}

// One line per parameter and buffer: what must agree across ranks.
std::vector<std::string> module_signature(const torch::nn::Module& module) {
  std::vector<std::string> lines;
  for (const auto& p : module.named_parameters(true)) {
    lines.push_back(c10::str("parameter ", p.key(), " ", describe(p.value())));
  }
  for (const auto& b : module.named_buffers(true)) {
    lines.push_back(c10::str("buffer ", b.key(), " ", describe(b.value())));
  }
  return lines;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

// How rank r's signature differs from rank 0's, or "" when it does not.
std::string signature_difference(const std::vector<std::string>& root,
                                 const std::vector<std::string>& other, int rank) {
  for (size_t i = 0; i < std::min(root.size(), other.size()); ++i) {
    if (root[i] != other[i]) {
      return c10::str("entry ", i, " is '", root[i], "' on rank 0 but '", other[i], "' on rank ",
                      rank);
    }
  }
  if (root.size() != other.size()) {
    const auto& longer = root.size() > other.size() ? root : other;
    return c10::str("rank 0 has ", root.size(), " parameters and buffers, rank ", rank, " has ",
                    other.size(), " (first extra: '", longer[std::min(root.size(), other.size())],
                    "')");
  }
  return "";
}

}  // namespace

void check_same_module_on_every_rank(const torch::nn::Module& module, ProcessGroup& group) {
  if (group.size() == 1) return;
  const std::string prefix = group.unique_prefix("ddp-model");
  const std::string text = join_lines(module_signature(module));
  group.store().set(prefix + std::to_string(group.rank()),
                    std::vector<uint8_t>(text.begin(), text.end()));
  std::vector<std::vector<std::string>> all;
  for (int r = 0; r < group.size(); ++r) {
    const std::string key = prefix + std::to_string(r);
    try {
      group.store().wait({key}, group.timeout());
    } catch (const std::exception&) {
      throw TimeoutError(c10::str("rank ", group.rank(), ": rank ", r,
                                  " did not construct DistributedDataParallel within the timeout"));
    }
    const std::vector<uint8_t> bytes = group.store().get(key);
    all.push_back(split_lines(std::string(bytes.begin(), bytes.end())));
  }
  for (int r = 1; r < group.size(); ++r) {
    const std::string diff = signature_difference(all[0], all[size_t(r)], r);
    if (!diff.empty()) {
      throw DistributedError(c10::str("DistributedDataParallel: rank ", r,
                                      "'s model differs from rank 0's: ", diff,
                                      "; every rank must build the same model"));
    }
  }
}

}  // namespace ddp

// A tensor's shape and type as error messages give them: "[3, 224, 224] Float".
#pragma once

#include <string>

#include <torch/types.h>

namespace ddp::data {

inline std::string shape_text(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "] " + std::string(c10::toString(t.scalar_type()));
}

}  // namespace ddp::data

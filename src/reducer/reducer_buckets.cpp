#include "reducer/reducer_buckets.h"

namespace ddp {

std::vector<std::vector<size_t>> group_into_buckets(const std::vector<torch::Tensor>& params,
                                                    const std::vector<size_t>& order,
                                                    size_t first_cap_bytes, size_t cap_bytes) {
  std::vector<std::vector<size_t>> groups;
  size_t bytes = 0;
  for (size_t index : order) {
    const torch::Tensor& p = params[index];
    const bool new_dtype =
        !groups.empty() && params[groups.back().front()].scalar_type() != p.scalar_type();
    const size_t limit = groups.size() <= 1 ? first_cap_bytes : cap_bytes;
    if (groups.empty() || new_dtype || bytes >= limit) {
      // The first bucket is the first group; its cap applies until it closes.
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(index);
    bytes += size_t(p.numel()) * p.element_size();
  }
  return groups;
}

// A tensor over `numel(param)` elements of `buffer` from `offset`, laid out like `param`
// (channels_last weights keep their strides). It is made with from_blob rather than as an
// autograd view of the buffer: LibTorch 1.13's Optimizer::zero_grad() calls detach_() on every
// gradient, which throws for views ("Can't detach views in-place"). The deleter holds the buffer,
// so the memory lives as long as any gradient does.
torch::Tensor bucket_view(const torch::Tensor& buffer, int64_t offset, const torch::Tensor& param) {
  char* base = static_cast<char*>(buffer.data_ptr()) + offset * int64_t(buffer.element_size());
  std::vector<int64_t> strides = param.strides().vec();
  if (!param.is_non_overlapping_and_dense()) {
    int64_t stride = 1;
    for (size_t d = strides.size(); d-- > 0;) {
      strides[d] = stride;
      stride *= param.size(int64_t(d));
    }
  }
  return torch::from_blob(
      base, param.sizes(), strides, [keep = buffer](void*) {}, buffer.options());
}

}  // namespace ddp

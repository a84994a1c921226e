// How the reducer lays gradients out in buckets: which parameters share one, and each
// gradient's place in its bucket's flat buffer. Internal to libddp (reducer.cpp).
#pragma once

#include <cstddef>
#include <vector>

#include <torch/torch.h>

namespace ddp {

/// `params` (indices into it, in `order`) cut into buckets: a new bucket when the dtype changes
/// or the current one holds `cap_bytes` (`first_cap_bytes` for the first bucket).
std::vector<std::vector<size_t>> group_into_buckets(const std::vector<torch::Tensor>& params,
                                                    const std::vector<size_t>& order,
                                                    size_t first_cap_bytes, size_t cap_bytes);

/// A tensor over `numel(param)` elements of `buffer` from `offset`, laid out like `param`.
torch::Tensor bucket_view(const torch::Tensor& buffer, int64_t offset, const torch::Tensor& param);

}  // namespace ddp

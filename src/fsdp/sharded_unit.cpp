// A unit's all-gather and reduce-scatter, and the storage of the module's parameter tensors,
// which is freed while the unit is sharded and allocated again (the same storage, so that the
// views autograd saved in forward see the values) when it is gathered, as FSDP2 does.
#include "fsdp/sharded_unit.h"

#include <c10/core/StorageImpl.h>
#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "ddp/process_group.h"

namespace ddp::fsdp {
namespace {

c10::StorageImpl* storage_of(const torch::Tensor& t) {
  return t.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl();
}

void free_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = storage_of(t);
  s->set_data_ptr_noswap(c10::DataPtr(nullptr, s->device()));
  s->set_nbytes(0);
}

void alloc_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = storage_of(t);
  const size_t bytes = size_t(t.numel()) * t.element_size();
  if (s->nbytes() >= bytes) return;
  s->set_data_ptr_noswap(s->allocator()->allocate(bytes));
  s->set_nbytes(bytes);
}

// Every rank's chunk padded to the first one's: the layout is one strided copy when the rows
// divide evenly.
bool divides_evenly(const ShardLayout& layout, int world) {
  return layout.rows == layout.chunk_rows * world;
}

}  // namespace

ShardedUnit::ShardedUnit(std::string name,
                         const std::vector<std::pair<std::string, torch::Tensor>>& params,
                         ProcessGroup& group, torch::ScalarType gather_dtype,
                         torch::ScalarType reduce_dtype)
    : name_(std::move(name)),
      group_(group),
      gather_dtype_(gather_dtype),
      reduce_dtype_(reduce_dtype) {
  torch::NoGradGuard no_grad;
  const int rank = group.rank();
  for (const auto& [param_name, tensor] : params) {
    ShardLayout layout(tensor.sizes().vec(), group.size(), part_numel_);
    part_numel_ += layout.padded_numel();
    torch::Tensor shard = tensor.detach()
                              .reshape(layout.shape)
                              .narrow(0, layout.first_row(rank), layout.local_rows(rank))
                              .clone();
    shard.set_requires_grad(tensor.requires_grad());
    // The module keeps its tensor (the same object its members and every view of it hold),
    // now with storage of its own in the gather dtype, freed until the first gather.
    torch::Tensor unsharded = tensor;
    unsharded.set_data(torch::empty(tensor.sizes(), tensor.options().dtype(gather_dtype)));
    free_storage(unsharded);
    params_.push_back(ShardedParameter{param_name,
                                       unsharded,
                                       unsharded.variable_data(),
                                       std::move(shard),
                                       layout,
                                       nullptr,
                                       false,
                                       false,
                                       {}});
  }
}

void ShardedUnit::unshard_async() {
  if (state_ != State::kSharded) return;
  state_ = State::kGathering;
  if (params_.empty()) return;
  torch::NoGradGuard no_grad;
  const int rank = group_.rank();
  const auto options = params_.front().shard.options().dtype(gather_dtype_);
  gather_input_ = torch::empty({part_numel_}, options);
  torch::Tensor& input = gather_input_;
  for (const auto& p : params_) {
    const ShardLayout& l = p.layout;
    torch::Tensor chunk = input.narrow(0, l.offset, l.padded_numel());
    const int64_t n = l.local_numel(rank);
    if (n > 0) chunk.narrow(0, 0, n).copy_(p.shard.reshape({-1}));
    if (n < l.padded_numel()) chunk.narrow(0, n, l.padded_numel() - n).zero_();
  }
  gather_buffer_ = torch::empty({part_numel_ * group_.size()}, options);
  gather_.emplace(group_.all_gather_single(gather_buffer_, input));
}

void ShardedUnit::wait_unshard() {
  if (state_ == State::kGathered) return;
  unshard_async();
  state_ = State::kGathered;
  if (params_.empty()) return;
  gather_->wait();
  gather_.reset();
  gather_input_ = torch::Tensor();
  torch::NoGradGuard no_grad;
  const int world = group_.size();
  const torch::Tensor parts = gather_buffer_.view({world, part_numel_});
  for (auto& p : params_) {
    alloc_storage(p.storage_view);
    const ShardLayout& l = p.layout;
    torch::Tensor flat = p.storage_view.view({-1});
    if (divides_evenly(l, world)) {
      flat.view({world, l.padded_numel()}).copy_(parts.narrow(1, l.offset, l.padded_numel()));
      continue;
    }
    for (int r = 0; r < world; ++r) {
      const int64_t n = l.local_numel(r);
      if (n == 0) continue;
      flat.narrow(0, l.first_row(r) * l.row_numel, n).copy_(parts[r].narrow(0, l.offset, n));
    }
  }
  gather_buffer_ = torch::Tensor();
}

void ShardedUnit::reshard() {
  if (state_ == State::kGathering && gather_) {
    gather_->wait();  // a prefetch no forward used: it must still finish on every rank
    gather_.reset();
    gather_input_ = torch::Tensor();
    gather_buffer_ = torch::Tensor();
  }
  for (auto& p : params_) free_storage(p.storage_view);
  state_ = State::kSharded;
}

bool ShardedUnit::all_gradients_in() const {
  for (const auto& p : params_) {
    // A frozen parameter has no gradient to wait for, but its values may still be needed for
    // the backward of what it multiplies: such a unit waits until backward has left it.
    if (!p.shard.requires_grad() || !p.got_gradient) return false;
  }
  return true;
}

bool ShardedUnit::trains() const {
  for (const auto& p : params_) {
    if (p.shard.requires_grad()) return true;
  }
  return false;
}

void ShardedUnit::keep_gradients_for_later() {
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    torch::Tensor& grad = p.unsharded.mutable_grad();
    if (!grad.defined() || grad.scalar_type() == torch::kFloat) continue;
    // Low-precision gradients accumulate in float32, as FSDP2's do.
    if (p.accumulated.defined()) {
      p.accumulated.add_(grad);
    } else {
      p.accumulated = grad.to(torch::kFloat);
    }
    grad = torch::Tensor();
  }
}

void ShardedUnit::abandon_reduce() {
  if (reduction_) reduction_->wait();  // it must finish on every rank; its result is dropped
  reduction_.reset();
  reduce_input_ = reduce_output_ = torch::Tensor();
  for (auto& p : params_) {
    p.unsharded.mutable_grad() = torch::Tensor();
    p.accumulated = torch::Tensor();
  }
}

void ShardedUnit::reduce_gradients_async() {
  if (!trains()) return;
  torch::NoGradGuard no_grad;
  const int world = group_.size();
  const auto options = params_.front().shard.options().dtype(reduce_dtype_);
  reduce_input_ = torch::empty({world * part_numel_}, options);
  torch::Tensor& input = reduce_input_;
  torch::Tensor parts = input.view({world, part_numel_});
  for (auto& p : params_) {
    const ShardLayout& l = p.layout;
    torch::Tensor region = parts.narrow(1, l.offset, l.padded_numel());  // [N, padded chunk]
    torch::Tensor grad = p.unsharded.grad();
    if (p.accumulated.defined()) {  // the micro-batches' before this one
      grad = grad.defined() ? p.accumulated.add_(grad) : p.accumulated;
      p.accumulated = torch::Tensor();
    }
    p.reduced_gradient = grad.defined();
    if (!grad.defined()) {
      region.zero_();
      continue;
    }
    torch::Tensor flat = grad.reshape({-1});
    if (divides_evenly(l, world)) {
      region.copy_(flat.view({world, l.padded_numel()}));
    } else {
      for (int r = 0; r < world; ++r) {
        const int64_t n = l.local_numel(r);
        torch::Tensor row = region[r];
        if (n > 0) row.narrow(0, 0, n).copy_(flat.narrow(0, l.first_row(r) * l.row_numel, n));
        if (n < l.padded_numel()) row.narrow(0, n, l.padded_numel() - n).zero_();
      }
    }
    p.unsharded.mutable_grad() = torch::Tensor();  // the full gradient is not kept
  }
  // A float16 sum of N gradients overflows where their average would not: divide first.
  const bool divide_first = reduce_dtype_ == torch::kHalf;
  if (divide_first) input.div_(world);
  reduce_output_ = torch::empty({part_numel_}, options);
  reduction_.emplace(group_.reduce_scatter_single(
      reduce_output_, input, divide_first ? Reduction::kSum : Reduction::kAverage));
}

void ShardedUnit::finish_reduce(const std::vector<char>& keep) {
  if (!reduction_) return;
  reduction_->wait();
  reduction_.reset();
  reduce_input_ = torch::Tensor();
  torch::NoGradGuard no_grad;
  const int rank = group_.rank();
  for (size_t i = 0; i < params_.size(); ++i) {
    ShardedParameter& p = params_[i];
    if (!p.shard.requires_grad() || (!keep.empty() && !keep[i])) continue;
    torch::Tensor mine = reduce_output_.narrow(0, p.layout.offset, p.layout.local_numel(rank))
                             .view(p.layout.local_shape(rank))
                             .to(p.shard.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    torch::Tensor& grad = p.shard.mutable_grad();
    if (grad.defined()) {
      grad.add_(mine);
    } else {
      grad = mine;
    }
  }
  reduce_output_ = torch::Tensor();
}

int64_t ShardedUnit::unsharded_bytes() const {
  int64_t bytes = 0;
  for (const auto& p : params_) {
    bytes += int64_t(storage_of(p.storage_view)->nbytes());
    const torch::Tensor& grad = p.unsharded.grad();
    if (grad.defined()) bytes += grad.numel() * grad.element_size();
  }
  return bytes;
}

}  // namespace ddp::fsdp

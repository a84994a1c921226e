// When each unit gathers, reshards and reduce-scatters. A unit's forward hooks gather it (and
// start gathering the next unit of the previous forward); its outputs' gradient hooks gather it
// again for backward (and start the next); its parameters' gradient hooks start its
// reduce-scatter once all are in. Every rank must issue the same collectives in the same order,
// so the reduce-scatters go strictly in reverse order of the units' forward starts (FSDP2's
// post-backward order, the root last), and a unit whose gradients are not all in when backward
// has provably left it (a unit that began before it ended begins its backward) goes with what it
// has: a parameter unused on one rank must not reorder that rank's collectives.
#include "ddp/fsdp/fully_shard.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "fsdp/sharded_unit.h"
#include "fsdp/unit_assignment.h"
#include "reducer/module_signature.h"
#include "torch_compat.h"

namespace ddp {

using fsdp::assign_parameters;
using fsdp::distinct_parameters;
using fsdp::dtype_of;
using fsdp::ShardedUnit;

// What one forward and its backward have done so far.
struct FSDPState::Iteration {
  int64_t clock = 0;
  std::vector<int64_t> start, end;  // per unit, the clock at its forward's start and end (-1)
  std::vector<size_t> forward_order;
  std::vector<char> backward_begun;
  bool in_backward = false;          // the end-of-backward callback is queued
  std::vector<size_t> reduce_order;  // units of this forward, latest start first
  size_t next_reduce = 0;            // the first of reduce_order not yet reduced

  explicit Iteration(size_t units) : start(units, -1), end(units, -1), backward_begun(units, 0) {}
};

namespace {

// Rank 0's parameters and buffers on every rank, as DistributedDataParallel starts.
void copy_rank0_state(torch::nn::Module& root, ProcessGroup& group) {
  if (group.size() == 1) return;
  torch::NoGradGuard no_grad;
  std::vector<Work> works;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // non-contiguous tensors
  auto send = [&](const torch::Tensor& t) {
    torch::Tensor data = t.detach();
    if (!data.is_contiguous()) {
      copies.emplace_back(data, data.contiguous());
      data = copies.back().second;
    }
    works.push_back(group.broadcast(data, 0));
  };
  for (const auto& [name, p] : distinct_parameters(root)) send(p);
  for (const auto& b : root.named_buffers(true)) send(b.value());
  for (auto& w : works) w.wait();
  for (auto& [dst, src] : copies) dst.copy_(src);
}
}  // namespace

FSDPState::FSDPState(std::shared_ptr<torch::nn::Module> root,
                     const std::vector<std::shared_ptr<torch::nn::Module>>& units,
                     std::shared_ptr<ProcessGroup> group, FSDPOptions options)
    : root_(std::move(root)),
      group_(std::move(group)),
      options_(options),
      alive_(std::make_shared<bool>(true)) {
  if (!root_) throw InvalidArgument("FullyShardedDataParallel: the module is null");
  if (!group_) throw InvalidArgument("FullyShardedDataParallel: the process group is null");
  // Before anything changes: sharding a module twice would take its tensors from the first.
  for (const auto& module : units) {
    if (module && forward_hooks_of(*module)) {
      throw InvalidArgument(c10::str("FullyShardedDataParallel: module ", module->name(),
                                     " is sharded already (or has forward hooks)"));
    }
  }
  if (forward_hooks_of(*root_)) {
    throw InvalidArgument("FullyShardedDataParallel: the module is sharded already");
  }
  check_same_module_on_every_rank(*root_, *group_);
  copy_rank0_state(*root_, *group_);

  std::vector<std::string> unit_names;
  const auto grouped = assign_parameters(*root_, units, unit_names);
  const auto& mp = options_.mixed_precision();
  for (size_t u = 0; u < grouped.size(); ++u) {
    const torch::ScalarType own = dtype_of(unit_names[u], grouped[u]);
    const torch::ScalarType gather = mp.param_dtype().value_or(own);
    const torch::ScalarType reduce = mp.reduce_dtype().value_or(gather);
    units_.push_back(
        std::make_unique<ShardedUnit>(unit_names[u], grouped[u], *group_, gather, reduce));
  }

  // Hooks: forward (through ddp::call), and each parameter's gradient.
  std::weak_ptr<bool> alive = alive_;
  for (size_t u = 0; u < units_.size(); ++u) {
    const torch::nn::Module& module = u < units.size() ? *units[u] : *root_;
    ForwardHooks hooks;
    hooks.before = [this, alive, u] {
      if (alive.lock()) before_forward(u);
    };
    hooks.after = [this, alive, u](const std::vector<torch::Tensor>& outputs) {
      if (alive.lock()) after_forward(u, outputs);
    };
    hook_handles_.push_back(register_forward_hooks(module, std::move(hooks)));
    auto& params = units_[u]->params();
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i].unsharded.requires_grad()) continue;
      params[i].accumulator = compat::grad_accumulator(params[i].unsharded);
      compat::add_post_hook(*params[i].accumulator, [this, alive, u, i] {
        if (!alive.lock()) return;
        units_[u]->params()[i].got_gradient = true;
        on_gradient();
      });
    }
  }
  iteration_ = std::make_unique<Iteration>(units_.size());
  // The shards in the module's parameter order, once: clipping and the memory count read them
  // every step.
  std::unordered_map<std::string, torch::Tensor> shards;
  for (const auto& unit : units_) {
    for (const auto& p : unit->params()) shards.emplace(p.name, p.shard);
  }
  for (const auto& [name, p] : distinct_parameters(*root_)) {
    named_shards_.emplace_back(name, shards.at(name));
  }
}

FSDPState::~FSDPState() { *alive_ = false; }

// --- forward ------------------------------------------------------------------------------------

void FSDPState::before_forward(size_t u) {
  const size_t root = units_.size() - 1;
  if (u == root) {
    // What the last iteration may have left: a backward that never ended (an exception in it)
    // left reductions in flight and full gradients; a forward without a backward left units
    // gathered, with weights an optimizer step may have changed since.
    for (auto& unit : units_) {
      if (iteration_->in_backward) unit->abandon_reduce();
      unit->reshard();
    }
    iteration_ = std::make_unique<Iteration>(units_.size());
    for (auto& unit : units_) {
      for (auto& p : unit->params()) p.got_gradient = false;
    }
  }
  Iteration& it = *iteration_;
  if (it.start[u] >= 0 || (it.start[root] < 0 && u != root)) {
    throw InvalidArgument(
        c10::str("FullyShardedDataParallel: unit ", units_[u]->name(),
                 it.start[u] >= 0
                     ? " ran forward twice in one iteration; call each unit once"
                     : " ran forward outside the root's forward; call the wrapper's forward()"));
  }
  it.start[u] = it.clock++;
  it.forward_order.push_back(u);
  units_[u]->wait_unshard();
  note_memory();
  if (options_.prefetch()) {
    auto at = std::find(last_forward_order_.begin(), last_forward_order_.end(), u);
    if (at != last_forward_order_.end() && at + 1 != last_forward_order_.end()) {
      units_[*(at + 1)]->unshard_async();
    }
  }
}

void FSDPState::after_forward(size_t u, const std::vector<torch::Tensor>& outputs) {
  const size_t root = units_.size() - 1;
  Iteration& it = *iteration_;
  it.end[u] = it.clock++;
  bool backward_follows = false;
  std::weak_ptr<bool> alive = alive_;
  if (torch::GradMode::is_enabled()) {
    for (const auto& t : outputs) {
      if (!t.defined() || !t.requires_grad()) continue;
      backward_follows = true;
      torch::Tensor output = t;
      output.register_hook([this, alive, u](const torch::Tensor&) {
        if (alive.lock()) before_backward(u);
      });
    }
  }
  if (u != root && (options_.reshard_after_forward() || !backward_follows)) units_[u]->reshard();
  if (u == root) {
    last_forward_order_ = it.forward_order;
    if (!backward_follows) reshard();  // evaluation: the optimizer may change the shards next
  }
}

// --- backward -----------------------------------------------------------------------------------

void FSDPState::begin_backward() {
  Iteration& it = *iteration_;
  if (it.in_backward) return;
  it.in_backward = true;
  it.reduce_order = it.forward_order;
  std::sort(it.reduce_order.begin(), it.reduce_order.end(),
            [&it](size_t a, size_t b) { return it.start[a] > it.start[b]; });
  // Units whose forward never ran this iteration take part too, at the end: their shards'
  // gradients must be computed the same way on every rank.
  for (size_t u = 0; u < units_.size(); ++u) {
    if (it.start[u] < 0) it.reduce_order.push_back(u);
  }
  std::weak_ptr<bool> alive = alive_;
  compat::queue_end_of_backward([this, alive] {
    if (alive.lock()) end_of_backward();
  });
}

void FSDPState::before_backward(size_t u) {
  Iteration& it = *iteration_;
  if (it.backward_begun[u]) return;  // the hook of another of its outputs
  it.backward_begun[u] = 1;
  begin_backward();
  // Every unit that began after this one ended has had all of its backward.
  while (it.next_reduce < it.reduce_order.size() &&
         it.start[it.reduce_order[it.next_reduce]] > it.end[u]) {
    reduce_next();
  }
  units_[u]->wait_unshard();
  note_memory();
  if (options_.prefetch()) {
    const size_t root = units_.size() - 1;
    auto at = std::find(it.reduce_order.begin(), it.reduce_order.end(), u);
    const auto next = u == root ? it.reduce_order.begin() : at + 1;
    if (next < it.reduce_order.end() && *next != root && it.start[*next] >= 0 &&
        !it.backward_begun[*next]) {
      units_[*next]->unshard_async();
    }
  }
  reduce_ready();
}

void FSDPState::on_gradient() {
  begin_backward();
  reduce_ready();
}

void FSDPState::reduce_ready() {
  Iteration& it = *iteration_;
  while (it.next_reduce < it.reduce_order.size() &&
         units_[it.reduce_order[it.next_reduce]]->all_gradients_in()) {
    reduce_next();
  }
}

void FSDPState::reduce_next() {
  Iteration& it = *iteration_;
  ShardedUnit& unit = *units_[it.reduce_order[it.next_reduce++]];
  if (sync_gradients_) {
    note_memory();
    unit.reduce_gradients_async();
  } else {
    unit.keep_gradients_for_later();
  }
  unit.reshard();
}

void FSDPState::end_of_backward() {
  Iteration& it = *iteration_;
  while (it.next_reduce < it.reduce_order.size()) reduce_next();
  it.in_backward = false;
  if (!sync_gradients_) return;
  // Which parameters had a gradient on some rank: the others keep theirs as it was.
  std::vector<std::vector<char>> keep(units_.size());
  std::string missing;
  if (options_.find_unused_parameters()) {
    int64_t count = 0;
    for (auto& unit : units_) count += int64_t(unit->params().size());
    torch::Tensor used = torch::zeros({count}, torch::kInt32);
    int32_t* u = used.data_ptr<int32_t>();
    for (auto& unit : units_) {
      for (auto& p : unit->params()) *u++ = p.reduced_gradient;
    }
    group_->allreduce_max(used).wait();
    u = used.data_ptr<int32_t>();
    for (size_t k = 0; k < units_.size(); ++k) {
      for (size_t i = 0; i < units_[k]->params().size(); ++i) keep[k].push_back(char(*u++));
    }
  } else {
    for (auto& unit : units_) {
      for (auto& p : unit->params()) {
        if (p.shard.requires_grad() && !p.reduced_gradient)
          missing += (missing.empty() ? "" : ", ") + p.name;
      }
    }
  }
  for (size_t k = 0; k < units_.size(); ++k) units_[k]->finish_reduce(keep[k]);
  if (!missing.empty()) {
    throw InvalidArgument(c10::str(
        "FullyShardedDataParallel (rank ", group_->rank(),
        "): these parameters received no gradient: ", missing,
        ". Make every parameter take part in the loss, or construct FullyShardedDataParallel with "
        "find_unused_parameters(true)"));
  }
}

// --- what a training loop calls -----------------------------------------------------------------

std::vector<torch::Tensor> FSDPState::parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& [name, shard] : named_parameters()) out.push_back(shard);
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> FSDPState::named_parameters() const {
  return named_shards_;
}

void FSDPState::set_requires_gradient_sync(bool sync) { sync_gradients_ = sync; }
bool FSDPState::requires_gradient_sync() const { return sync_gradients_; }

double FSDPState::clip_grad_norm_(double max_norm) {
  // The arithmetic of torch.nn.utils.clip_grad_norm_ over FSDP2's sharded gradients, in float32
  // as there: each parameter's norm from its shards' (a local norm, squared, summed over the
  // ranks, to the power 1/2: DTensor's partial norm), the norm of those norms, then one factor.
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads, local_norms;
  for (const auto& shard : parameters()) {
    if (!shard.grad().defined()) continue;
    grads.push_back(shard.grad());
    local_norms.push_back(shard.grad().norm().to(torch::kFloat));
  }
  if (grads.empty()) return 0.0;
  torch::Tensor squares = torch::stack(local_norms).pow(2);
  group_->allreduce(squares).wait();
  const torch::Tensor total = squares.pow(0.5).norm();
  const torch::Tensor coefficient = (max_norm / (total + 1e-6)).clamp_max(1.0);
  for (auto& g : grads) g.mul_(coefficient);
  return total.item<double>();
}

void FSDPState::unshard() {
  for (auto& unit : units_) unit->unshard_async();
  for (auto& unit : units_) unit->wait_unshard();
  note_memory();
}

void FSDPState::reshard() {
  for (auto& unit : units_) unit->reshard();
}

torch::OrderedDict<std::string, torch::Tensor> FSDPState::full_state_dict() {
  torch::NoGradGuard no_grad;
  const int world = group_->size();
  std::unordered_map<const void*, torch::Tensor> whole;  // module's TensorImpl → values
  for (auto& unit : units_) {
    for (auto& p : unit->params()) {
      const auto& l = p.layout;
      torch::Tensor input = torch::zeros({l.padded_numel()}, p.shard.options());
      input.narrow(0, 0, l.local_numel(group_->rank())).copy_(p.shard.reshape({-1}));
      torch::Tensor gathered = torch::empty({world * l.padded_numel()}, p.shard.options());
      group_->all_gather_single(gathered, input).wait();
      torch::Tensor value = gathered.view({world * l.chunk_rows, l.row_numel})
                                .narrow(0, 0, l.rows)
                                .reshape(p.unsharded.sizes());
      whole.emplace(p.unsharded.unsafeGetTensorImpl(), value.clone());
    }
  }
  torch::OrderedDict<std::string, torch::Tensor> state;
  for (const auto& p : root_->named_parameters(true)) {
    state.insert(p.key(), whole.at(p.value().unsafeGetTensorImpl()));
  }
  for (const auto& b : root_->named_buffers(true))
    state.insert(b.key(), b.value().detach().clone());
  return state;
}

void FSDPState::load_full_state_dict(const torch::OrderedDict<std::string, torch::Tensor>& state) {
  torch::NoGradGuard no_grad;
  auto entry = [&state](const std::string& name, at::IntArrayRef shape) {
    const torch::Tensor* t = state.find(name);
    if (!t) {
      throw InvalidArgument(
          c10::str("FullyShardedDataParallel: the state dict has no entry ", name));
    }
    if (t->sizes() != shape) {
      throw InvalidArgument(c10::str("FullyShardedDataParallel: entry ", name, " has shape ",
                                     t->sizes(), ", the model's is ", shape));
    }
    return *t;
  };
  const int rank = group_->rank();
  for (auto& unit : units_) {
    for (auto& p : unit->params()) {
      const auto& l = p.layout;
      torch::Tensor value = entry(p.name, p.unsharded.sizes()).reshape(l.shape);
      p.shard.copy_(value.narrow(0, l.first_row(rank), l.local_rows(rank)));
    }
  }
  for (const auto& b : root_->named_buffers(true))
    b.value().copy_(entry(b.key(), b.value().sizes()));
  reshard();  // a gathered unit would hold the old values
}

FSDPMemory FSDPState::memory() const {
  FSDPMemory m = memory_;
  m.sharded_parameter_bytes = m.sharded_gradient_bytes = m.unsharded_bytes = 0;
  for (const auto& unit : units_) {
    for (const auto& p : unit->params()) {
      m.sharded_parameter_bytes += p.shard.numel() * p.shard.element_size();
      if (p.shard.grad().defined())
        m.sharded_gradient_bytes += p.shard.grad().numel() * p.shard.grad().element_size();
    }
    m.unsharded_bytes += unit->unsharded_bytes();
  }
  m.peak_unsharded_bytes = std::max(m.peak_unsharded_bytes, m.unsharded_bytes);
  return m;
}

void FSDPState::reset_peak_memory() { memory_.peak_unsharded_bytes = 0; }

void FSDPState::note_memory() {
  int64_t bytes = 0;
  for (const auto& unit : units_) bytes += unit->unsharded_bytes();
  memory_.peak_unsharded_bytes = std::max(memory_.peak_unsharded_bytes, bytes);
}

std::vector<std::pair<std::string, std::vector<std::string>>> FSDPState::unit_parameter_names()
    const {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (const auto& unit : units_) {
    std::vector<std::string> names;
    for (const auto& p : unit->params()) names.push_back(p.name);
    out.emplace_back(unit->name(), std::move(names));
  }
  return out;
}

}  // namespace ddp

#include "ddp/reducer.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <unordered_set>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "ddp/process_group.h"
#include "reducer/module_signature.h"
#include "reducer/reducer_buckets.h"
#include "reducer/reducer_internal.h"
#include "torch_compat.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

struct Bucket {
  torch::Tensor buffer;        // flat storage of every gradient in the bucket
  std::vector<size_t> params;  // parameter indices, in layout order
  int pending = 0;             // gradients not yet ready this iteration
  std::unique_ptr<PendingReduction> reduction;
};

}  // namespace

struct Reducer::Impl : std::enable_shared_from_this<Reducer::Impl> {
  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<ProcessGroup> group;
  DDPOptions options;
  std::unique_ptr<CommHook> hook = std::make_unique<AllReduceHook>();

  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  std::vector<compat::NodePtr> accumulators;  // kept alive: hooks live there
  std::unordered_map<const torch::autograd::Node*, size_t> accumulator_index;
  std::vector<torch::Tensor> buffers;

  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of;     // parameter → bucket
  std::vector<torch::Tensor> views;  // parameter → its slice of its bucket, shaped like it

  // Per-iteration state.
  bool armed = false;  // a synchronised backward is expected
  bool finalize_queued = false;
  std::vector<char> ready;
  std::vector<char> used;      // produced a gradient (or not found unused) this iteration
  std::vector<char> had_grad;  // .grad was defined before this iteration
  std::vector<size_t> unused;  // found unused by after_forward
  size_t next_bucket = 0;
  int hooks_fired = 0;
  std::vector<size_t> ready_order;  // first iteration's order, for the rebuild
  bool record_order = true;
  bool rebuild_pending = false;
  std::string unfinished_error;  // reported at the next forward, as PyTorch does
  detail::ReducerInternals::ForwardNotice forward_notice;  // ddp::Join's, while in one

  ReducerStats stats;

  void sync_module_states(int root);
  // Whether each forward broadcasts rank 0's buffers (there are some, and other ranks to send to).
  bool broadcasts_buffers() const {
    return options.broadcast_buffers() && group->size() > 1 && !buffers.empty();
  }
  void broadcast_buffers();
  void arm();
  void build_buckets(const std::vector<size_t>& order);
  void on_gradient(size_t index);
  void mark_ready(size_t index);
  void launch_ready_buckets();
  void finalize();
  void rebuild_buckets();
  void attach_grad_to_view(size_t index);
};

// --- construction ---------------------------------------------------------------------------

void Reducer::Impl::sync_module_states(int root) {
  if (group->size() == 1) return;
  // One flat broadcast per dtype (in the same order everywhere), then copied back.
  std::vector<torch::Tensor> all = params;
  all.insert(all.end(), buffers.begin(), buffers.end());
  torch::NoGradGuard no_grad;
  std::vector<c10::ScalarType> dtypes;
  for (const auto& t : all) {
    if (std::find(dtypes.begin(), dtypes.end(), t.scalar_type()) == dtypes.end()) {
      dtypes.push_back(t.scalar_type());
    }
  }
  for (c10::ScalarType dtype : dtypes) {
    std::vector<torch::Tensor> members;
    for (const auto& t : all) {
      if (t.scalar_type() == dtype) members.push_back(t);
    }
    std::vector<torch::Tensor> flat_parts;
    for (const auto& t : members) flat_parts.push_back(t.reshape({-1}));
    torch::Tensor flat = torch::cat(flat_parts);
    group->broadcast(flat, root).wait();
    int64_t offset = 0;
    for (auto& t : members) {
      t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

void Reducer::Impl::build_buckets(const std::vector<size_t>& order) {
  const std::vector<std::vector<size_t>> groups =
      group_into_buckets(params, order, size_t(options.first_bucket_cap_mb() * 1024 * 1024),
                         size_t(options.bucket_cap_mb() * 1024 * 1024));
  // Keep the gradients the old buckets hold (needed when rebuilding between iterations).
  std::vector<torch::Tensor> old_grads(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor& g = params[i].grad();
    if (g.defined()) old_grads[i] = g;
  }
  buckets.clear();
  buckets.resize(groups.size());
  bucket_of.assign(params.size(), 0);
  views.assign(params.size(), torch::Tensor());
  for (size_t b = 0; b < groups.size(); ++b) {
    int64_t numel = 0;
    for (size_t index : groups[b]) numel += params[index].numel();
    Bucket& bucket = buckets[b];
    bucket.buffer = torch::zeros({numel}, params[groups[b].front()].options());
    bucket.params = groups[b];
    int64_t offset = 0;
    for (size_t index : groups[b]) {
      const torch::Tensor& p = params[index];
      views[index] = bucket_view(bucket.buffer, offset, p);
      bucket_of[index] = b;
      offset += p.numel();
    }
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    if (old_grads[i].defined()) {
      views[i].copy_(old_grads[i]);
      params[i].mutable_grad() = views[i];
    }
  }
  stats.num_buckets = int(buckets.size());
  stats.bytes_reduced_per_iteration = 0;
  for (const auto& bucket : buckets) {
    stats.bytes_reduced_per_iteration += bucket.buffer.numel() * bucket.buffer.element_size();
  }
}

Reducer::Reducer(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<ProcessGroup> group,
                 DDPOptions options)
    : impl_(std::make_shared<Impl>()) {
  Impl& s = *impl_;
  if (!module) throw InvalidArgument("DistributedDataParallel: the module is null");
  if (!group) throw InvalidArgument("DistributedDataParallel: the process group is null");
  if (!(options.bucket_cap_mb() > 0) || !(options.first_bucket_cap_mb() > 0)) {
    throw InvalidArgument(c10::str("DistributedDataParallel: bucket caps must be positive, got ",
                                   options.first_bucket_cap_mb(), " and ", options.bucket_cap_mb(),
                                   " MiB"));
  }
  s.module = std::move(module);
  s.group = std::move(group);
  s.options = options;

  // Every rank must hold the same model, or fail here saying how it differs.
  check_same_module_on_every_rank(*s.module, *s.group);

  std::unordered_set<const void*> seen;
  for (const auto& p : s.module->named_parameters(true)) {
    if (!p.value().requires_grad()) continue;
    if (!seen.insert(p.value().unsafeGetTensorImpl()).second) continue;  // shared parameter
    if (p.value().is_sparse()) {
      throw InvalidArgument(c10::str("DistributedDataParallel: parameter ", p.key(),
                                     " is sparse; only dense parameters are supported"));
    }
    s.params.push_back(p.value());
    s.names.push_back(p.key());
  }
  for (const auto& b : s.module->named_buffers(true)) s.buffers.push_back(b.value());
  if (s.params.empty()) {
    throw InvalidArgument(
        "DistributedDataParallel: the module has no parameter that requires grad");
  }
  s.sync_module_states(0);

  std::vector<size_t> reverse_order(s.params.size());
  for (size_t i = 0; i < reverse_order.size(); ++i) reverse_order[i] = s.params.size() - 1 - i;
  s.build_buckets(reverse_order);

  std::weak_ptr<Impl> weak = impl_;
  for (size_t i = 0; i < s.params.size(); ++i) {
    auto acc = compat::grad_accumulator(s.params[i]);
    s.accumulator_index[acc.get()] = i;
    compat::add_post_hook(*acc, [weak, i] {
      if (auto impl = weak.lock()) impl->on_gradient(i);
    });
    s.accumulators.push_back(std::move(acc));
  }
  s.ready.assign(s.params.size(), 0);
  s.used.assign(s.params.size(), 0);
  s.had_grad.assign(s.params.size(), 0);
}

Reducer::~Reducer() = default;

// --- one iteration ------------------------------------------------------------------------------

void Reducer::Impl::broadcast_buffers() {
  if (!broadcasts_buffers()) return;
  torch::NoGradGuard no_grad;
  std::vector<Work> works;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // non-contiguous buffers
  for (auto& b : buffers) {
    if (b.is_contiguous()) {
      works.push_back(group->broadcast(b, 0));
    } else {
      copies.emplace_back(b, b.contiguous());
      works.push_back(group->broadcast(copies.back().second, 0));
    }
  }
  for (auto& w : works) w.wait();
  for (auto& c : copies) c.first.copy_(c.second);
}

// Resets the per-iteration state for a synchronised backward.
void Reducer::Impl::arm() {
  armed = true;
  std::fill(ready.begin(), ready.end(), 0);
  std::fill(used.begin(), used.end(), 0);
  for (size_t i = 0; i < params.size(); ++i) had_grad[i] = params[i].grad().defined();
  for (auto& bucket : buckets) {
    bucket.pending = int(bucket.params.size());
    bucket.reduction.reset();
  }
  unused.clear();
  next_bucket = 0;
  hooks_fired = 0;
  stats.bytes_communicated_per_iteration = 0;
  finalize_queued = false;
  stats.hooks_before_launch.assign(buckets.size(), -1);
}

void Reducer::before_forward() {
  Impl& s = *impl_;
  if (!s.unfinished_error.empty()) {
    const std::string message = s.unfinished_error;
    s.unfinished_error.clear();
    throw DistributedError(message);
  }
  const bool sync_gradients = sync_ && torch::GradMode::is_enabled();
  if (s.forward_notice && (sync_gradients || s.broadcasts_buffers() || s.rebuild_pending)) {
    s.forward_notice(sync_gradients);
  }
  if (s.rebuild_pending) s.rebuild_buckets();
  s.broadcast_buffers();
  s.armed = false;
  if (sync_gradients) s.arm();
}

void Reducer::after_forward(const std::vector<torch::Tensor>& outputs) {
  Impl& s = *impl_;
  if (!s.armed || !s.options.find_unused_parameters()) return;
  // Walk the autograd graph from the outputs; parameters whose accumulator is not reached
  // will get no gradient and are marked ready when backward starts.
  std::vector<char> reached(s.params.size(), 0);
  std::unordered_set<const torch::autograd::Node*> visited;
  std::vector<torch::autograd::Node*> stack;
  for (const auto& out : outputs) {
    if (out.defined() && out.grad_fn()) stack.push_back(out.grad_fn().get());
  }
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (!visited.insert(node).second) continue;
    auto it = s.accumulator_index.find(node);
    if (it != s.accumulator_index.end()) reached[it->second] = 1;
    for (const auto& edge : node->next_edges()) {
      if (edge.function) stack.push_back(edge.function.get());
    }
  }
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (!reached[i]) s.unused.push_back(i);
  }
}

void Reducer::Impl::attach_grad_to_view(size_t index) {
  torch::Tensor& grad = params[index].mutable_grad();
  const torch::Tensor& view = views[index];
  if (grad.defined() && grad.data_ptr() == view.data_ptr() && grad.strides() == view.strides()) {
    return;  // already accumulating in place
  }
  torch::NoGradGuard no_grad;
  if (grad.defined()) {
    view.copy_(grad);
  } else {
    view.zero_();
  }
  grad = view;
}

void Reducer::Impl::on_gradient(size_t index) {
  if (!armed) return;  // no_sync(), or a backward that did not go through our forward
  if (!finalize_queued) {
    finalize_queued = true;
    // The engine runs the callback on this thread once the whole backward has finished.
    compat::queue_end_of_backward([weak = weak_from_this()] {
      if (auto impl = weak.lock()) impl->finalize();
    });
    for (size_t u : unused) {
      // Unused parameters contribute what their .grad holds (zero when it has none).
      attach_grad_to_view(u);
      mark_ready(u);
    }
  }
  if (ready[index]) {
    throw DistributedError(
        c10::str("DistributedDataParallel: parameter ", names[index],
                 " received a gradient twice in one backward (a second backward "
                 "through the same graph?); call forward again before backward"));
  }
  attach_grad_to_view(index);
  used[index] = 1;
  ++hooks_fired;
  if (record_order) ready_order.push_back(index);
  mark_ready(index);
}

void Reducer::Impl::mark_ready(size_t index) {
  ready[index] = 1;
  Bucket& bucket = buckets[bucket_of[index]];
  if (--bucket.pending == 0) launch_ready_buckets();
}

void Reducer::Impl::launch_ready_buckets() {
  // Buckets start strictly in index order on every rank, so collectives match across ranks.
  while (next_bucket < buckets.size() && buckets[next_bucket].pending == 0) {
    Bucket& bucket = buckets[next_bucket];
    GradBucket view{int(next_bucket), bucket.buffer, {}, next_bucket + 1 == buckets.size()};
    for (size_t index : bucket.params) view.gradients.push_back(views[index]);
    stats.hooks_before_launch[next_bucket] = hooks_fired;
    bucket.reduction = hook->start(view, *group);
    stats.bytes_communicated_per_iteration += bucket.reduction->payload_bytes();
    ++next_bucket;
  }
}

void Reducer::Impl::finalize() {
  if (!armed) return;
  armed = false;
  const auto start = Clock::now();
  if (next_bucket < buckets.size()) {
    // Some parameter produced no gradient: the remaining buckets cannot be reduced.
    std::string missing;
    int count = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      if (!ready[i]) {
        missing += (count++ ? ", " : "") + names[i];
      }
    }
    for (size_t b = 0; b < next_bucket; ++b) buckets[b].reduction->wait();
    unfinished_error = c10::str(
        "DistributedDataParallel (rank ", group->rank(),
        "): expected to have finished reduction in the prior iteration before starting a new one. "
        "These parameters received no gradient: ",
        missing,
        ". Make every parameter take part in the loss, or construct DistributedDataParallel with "
        "find_unused_parameters(true)");
    return;
  }
  for (auto& bucket : buckets) {
    bucket.reduction->wait();
    bucket.reduction.reset();
  }
  if (options.find_unused_parameters()) {
    // A parameter unused on every rank keeps an undefined .grad, as in a single process.
    torch::Tensor used_anywhere = torch::empty({int64_t(params.size())}, torch::kInt32);
    int32_t* u = used_anywhere.data_ptr<int32_t>();
    for (size_t i = 0; i < params.size(); ++i) u[i] = used[i];
    group->allreduce_max(used_anywhere).wait();
    for (size_t i = 0; i < params.size(); ++i) {
      if (u[i] == 0 && !had_grad[i]) params[i].mutable_grad() = torch::Tensor();
    }
  }
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  stats.last_exposed_comm_seconds = waited;
  stats.total_exposed_comm_seconds += waited;
  stats.hooks_per_iteration = hooks_fired;
  ++stats.iterations;
  if (record_order) {
    record_order = false;
    rebuild_pending = options.rebuild_buckets();
  }
}

void Reducer::Impl::rebuild_buckets() {
  rebuild_pending = false;
  // Rank 0's order wins, so every rank builds the same buckets.
  std::vector<size_t> order = ready_order;
  std::vector<char> listed(params.size(), 0);
  for (size_t i : order) listed[i] = 1;
  for (size_t i = params.size(); i-- > 0;) {
    if (!listed[i]) order.push_back(i);
  }
  torch::Tensor shared = torch::empty({int64_t(order.size())}, torch::kInt64);
  for (size_t i = 0; i < order.size(); ++i) shared.data_ptr<int64_t>()[i] = int64_t(order[i]);
  if (group->size() > 1) group->broadcast(shared, 0).wait();
  for (size_t i = 0; i < order.size(); ++i) order[i] = size_t(shared.data_ptr<int64_t>()[i]);
  build_buckets(order);
  stats.buckets_rebuilt = true;
}

// --- what ddp::Join uses (reducer_internal.h) ----------------------------------------------------

void detail::ReducerInternals::set_forward_notice(Reducer& reducer, ForwardNotice notice) {
  reducer.impl_->forward_notice = std::move(notice);
}

bool detail::ReducerInternals::has_forward_notice(const Reducer& reducer) {
  return bool(reducer.impl_->forward_notice);
}

void detail::ReducerInternals::shadow_step(Reducer& reducer, bool sync_gradients) {
  Reducer::Impl& s = *reducer.impl_;
  if (s.rebuild_pending) s.rebuild_buckets();
  s.broadcast_buffers();
  if (!sync_gradients) return;
  s.arm();
  s.armed = false;  // no backward runs here: the hooks stay quiet
  // This rank contributes zeros: every gradient becomes its (zeroed) view into the buckets, so
  // the average of the others lands in .grad, ready for the same optimizer step.
  for (size_t i = 0; i < s.params.size(); ++i) s.params[i].mutable_grad() = s.views[i];
  {
    torch::NoGradGuard no_grad;
    for (auto& bucket : s.buckets) bucket.buffer.zero_();
  }
  std::fill(s.ready.begin(), s.ready.end(), 1);
  for (auto& bucket : s.buckets) bucket.pending = 0;
  s.launch_ready_buckets();  // all of them, in bucket order, as the others do
  s.armed = true;            // finalize() waits, handles unused parameters and counts the iteration
  s.finalize();
}

void detail::ReducerInternals::broadcast_module_states(Reducer& reducer, int root) {
  Reducer::Impl& s = *reducer.impl_;
  if (root < 0 || root >= s.group->size()) {
    throw InvalidArgument(
        c10::str("broadcast_module_states: rank ", root, " is outside [0, ", s.group->size(), ")"));
  }
  s.sync_module_states(root);
}

ProcessGroup& detail::ReducerInternals::group(Reducer& reducer) { return *reducer.impl_->group; }

// --- accessors ----------------------------------------------------------------------------------

void Reducer::set_comm_hook(std::unique_ptr<CommHook> hook) {
  if (!hook) throw InvalidArgument("set_comm_hook: the hook is null");
  if (impl_->stats.iterations > 0) {
    throw InvalidArgument("set_comm_hook must be called before the first backward");
  }
  impl_->hook = std::move(hook);
}

const ReducerStats& Reducer::stats() const { return impl_->stats; }

std::vector<std::vector<std::string>> Reducer::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& bucket : impl_->buckets) {
    out.emplace_back();
    for (size_t index : bucket.params) out.back().push_back(impl_->names[index]);
  }
  return out;
}

}  // namespace ddp

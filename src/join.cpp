#include "ddp/join.h"

#include "ddp/error.h"
#include "ddp/process_group.h"
#include "reducer/reducer_internal.h"

namespace ddp {
namespace {

using detail::ReducerInternals;

// The protocol's one message, summed over every rank before each step that communicates: how
// many ranks still train, and whether their step synchronises gradients. A training rank sends
// (1, sync) as its forward starts; a joined rank sends (0, 0) and shadows what the sum says.
struct Notice {
  int64_t training = 0;
  bool sync_gradients = false;
};

Notice exchange_notice(ProcessGroup& group, bool training, bool sync_gradients) {
  torch::Tensor sum =
      torch::tensor({int64_t(training), int64_t(training && sync_gradients)}, torch::kInt64);
  group.allreduce(sum).wait();
  return {sum[0].item<int64_t>(), sum[1].item<int64_t>() > 0};
}

}  // namespace

Join::Join(Reducer& reducer, std::function<void()> on_shadow_step)
    : reducer_(reducer), on_shadow_step_(std::move(on_shadow_step)) {
  if (ReducerInternals::has_forward_notice(reducer_)) {
    throw InvalidArgument("ddp::Join: this model is already in a Join");
  }
  ProcessGroup& group = ReducerInternals::group(reducer_);
  ReducerInternals::set_forward_notice(
      reducer_, [&group](bool sync_gradients) { exchange_notice(group, true, sync_gradients); });
}

Join::~Join() { ReducerInternals::set_forward_notice(reducer_, nullptr); }

int64_t Join::join() {
  if (joined_) throw InvalidArgument("ddp::Join::join() called twice");
  joined_ = true;
  ReducerInternals::set_forward_notice(reducer_, nullptr);
  ProcessGroup& group = ReducerInternals::group(reducer_);
  int64_t shadowed = 0;
  while (true) {
    const Notice notice = exchange_notice(group, false, false);
    if (notice.training == 0) break;  // everyone has joined
    ReducerInternals::shadow_step(reducer_, notice.sync_gradients);
    if (notice.sync_gradients && on_shadow_step_) on_shadow_step_();
    ++shadowed;
  }
  // The last to join (shadowed nothing) trained every step; the highest such rank is the source.
  torch::Tensor source = torch::tensor({int32_t(shadowed == 0 ? group.rank() : -1)}, torch::kInt32);
  group.allreduce_max(source).wait();
  ReducerInternals::broadcast_module_states(reducer_, source.item<int32_t>());
  return shadowed;
}

}  // namespace ddp

#include "ddp/join.h"

#include "ddp/error.h"
#include "ddp/process_group.h"

namespace ddp {

Join::Join(Reducer& reducer, std::function<void()> on_shadow_step)
    : reducer_(reducer), on_shadow_step_(std::move(on_shadow_step)) {
  if (reducer_.join_mode()) throw InvalidArgument("ddp::Join: this model is already in a Join");
  reducer_.set_join_mode(true);
}

Join::~Join() { reducer_.set_join_mode(false); }

int64_t Join::join() {
  if (joined_) throw InvalidArgument("ddp::Join::join() called twice");
  joined_ = true;
  reducer_.set_join_mode(false);
  ProcessGroup& group = reducer_.group();
  int64_t shadowed = 0;
  while (true) {
    // The ranks still training add (1, sync) in their forward (Reducer::before_forward).
    torch::Tensor notice = torch::zeros({2}, torch::kInt64);
    group.allreduce(notice).wait();
    const int64_t training = notice[0].item<int64_t>();
    if (training == 0) break;  // everyone has joined
    const bool sync_gradients = notice[1].item<int64_t>() > 0;
    reducer_.shadow_step(sync_gradients);
    if (sync_gradients && on_shadow_step_) on_shadow_step_();
    ++shadowed;
  }
  // The last to join (shadowed nothing) trained every step; the highest such rank is the source.
  torch::Tensor source = torch::tensor({int32_t(shadowed == 0 ? group.rank() : -1)}, torch::kInt32);
  group.allreduce_max(source).wait();
  reducer_.broadcast_module_states(source.item<int32_t>());
  return shadowed;
}

}  // namespace ddp

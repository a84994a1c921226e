// Uneven inputs, as PyTorch's Join context manager: ranks may have different numbers of
// batches (DistributedSampler with pad = false). A rank that runs out calls join() and, until
// every rank has, shadows the collectives of the ranks still training — each of their steps
// becomes a zero-gradient reduction here — instead of leaving them waiting in an all-reduce.
//
//   ddp::Join join(model, [&] { optimizer.step(); });  // joined ranks step with the others
//   for (auto& batch : my_batches) { ...forward, backward, optimizer.step()... }
//   join.join();  // every rank, once, after its last batch
//
// Gradients are averaged over the whole world (joined ranks contribute zeros), as PyTorch's
// default divide_by_initial_world_size. With the optimizer step passed as on_shadow_step, joined
// ranks keep the same weights and optimizer state as the others throughout; without it they fall
// behind and, at the end, every rank takes the weights and buffers of the last rank to join
// (PyTorch's behaviour; the optimizer state of the early joiners then differs).
// Not covered: collectives outside DDP's own (SyncBatchNorm's forward, user all-reduces) — those
// cannot be shadowed; pad the data for them.
#pragma once

#include <cstdint>
#include <functional>

#include "ddp/ddp.h"
#include "ddp/reducer.h"

namespace ddp {

class Join {
 public:
  /// Puts `reducer` in join mode: from now on every forward through the DDP wrapper tells the
  /// other ranks this one still trains (one all-reduce of two integers). `on_shadow_step` runs
  /// on a joined rank after each shadowed step that synchronised gradients, with the averaged
  /// gradients in .grad.
  explicit Join(Reducer& reducer, std::function<void()> on_shadow_step = {});
  template <typename ModuleType>
  explicit Join(DistributedDataParallel<ModuleType>& model,
                std::function<void()> on_shadow_step = {})
      : Join(model.reducer(), std::move(on_shadow_step)) {}
  /// Leaves join mode (communicates nothing: call join() before).
  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  /// This rank has no more batches: shadows the others' steps until every rank has joined,
  /// then every rank takes the parameters and buffers of the last rank to join. Returns the
  /// number of steps shadowed. Call once.
  int64_t join();

 private:
  Reducer& reducer_;
  std::function<void()> on_shadow_step_;
  bool joined_ = false;
};

}  // namespace ddp

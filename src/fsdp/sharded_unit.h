// One FSDP unit: the parameters one module holds (those no inner unit holds), their shards on
// this rank, and the unit's two collectives: the all-gather that fills the module's own
// parameter tensors, and the reduce-scatter that turns their full gradients into the shards'.
// Internal to libddp; FSDPState (fully_shard.cpp) decides when each runs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "ddp/fsdp/fully_shard.h"
#include "fsdp/shard_layout.h"
#include "torch_compat.h"

namespace ddp::fsdp {

struct ShardedParameter {
  std::string name;            // the module's name for it
  torch::Tensor unsharded;     // the module's own tensor; its storage is freed while sharded
  torch::Tensor storage_view;  // unsharded.variable_data(): writes that leave autograd's
                               // version counter of the parameter alone
  torch::Tensor shard;         // this rank's rows, a leaf the optimizer steps
  ShardLayout layout;
  compat::NodePtr accumulator;    // keeps the gradient hook alive
  bool got_gradient = false;      // its gradient hook ran this iteration
  bool reduced_gradient = false;  // it had a gradient when the unit was reduce-scattered
  torch::Tensor accumulated;      // float32 sum of low-precision gradients kept without sync
};

class ShardedUnit {
 public:
  /// Takes `params` (name, the module's tensor) over: copies this rank's rows into shards and
  /// frees the tensors' storage. `gather_dtype`, `reduce_dtype`: the mixed-precision policy's.
  ShardedUnit(std::string name, const std::vector<std::pair<std::string, torch::Tensor>>& params,
              ProcessGroup& group, torch::ScalarType gather_dtype, torch::ScalarType reduce_dtype);

  const std::string& name() const { return name_; }
  std::vector<ShardedParameter>& params() { return params_; }
  const std::vector<ShardedParameter>& params() const { return params_; }

  bool gathered() const { return state_ == State::kGathered; }
  /// Starts the all-gather unless the unit is gathered or gathering.
  void unshard_async();
  /// Finishes it: the module's parameters hold their values.
  void wait_unshard();
  /// Frees the gathered parameters (their storage; views of them stay valid for a later gather).
  void reshard();

  /// Whether every parameter has had its gradient this iteration (never, with a frozen one).
  bool all_gradients_in() const;
  /// Whether any parameter requires a gradient (else there is nothing to reduce).
  bool trains() const;
  /// Without gradient sync: moves low-precision full gradients into float32 sums, which the
  /// next reduce-scatter adds in.
  void keep_gradients_for_later();
  /// After a backward that never ended: waits for a reduce-scatter in flight, drops its result
  /// and every full gradient.
  void abandon_reduce();
  /// Starts the reduce-scatter of the averaged full gradients (zeros for a parameter without
  /// one) and frees them.
  void reduce_gradients_async();
  /// Waits for it; a parameter in `keep` (one flag per parameter, all when empty) gets the
  /// average of its rows added to its shard's gradient (or set, where it has none).
  void finish_reduce(const std::vector<char>& keep);
  bool reducing() const { return reduction_.has_value(); }

  /// Bytes held now for gathered parameters and full gradients.
  int64_t unsharded_bytes() const;

 private:
  enum class State { kSharded, kGathering, kGathered };
  std::string name_;
  ProcessGroup& group_;
  std::vector<ShardedParameter> params_;
  int64_t part_numel_ = 0;  // one rank's part of the flat buffers
  torch::ScalarType gather_dtype_;
  torch::ScalarType reduce_dtype_;
  State state_ = State::kSharded;
  // The collectives' buffers, kept until they finish (a backend need not hold them).
  torch::Tensor gather_input_;   // [part] while gathering
  torch::Tensor gather_buffer_;  // [N × part] while gathering
  std::optional<Work> gather_;
  torch::Tensor reduce_input_;   // [N × part] while reducing
  torch::Tensor reduce_output_;  // [part] while reducing
  std::optional<Work> reduction_;
};

}  // namespace ddp::fsdp

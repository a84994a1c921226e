// The collectives: each numbered and noted in the flight recorder, checked across the ranks
// under debug_collectives, run by the backend, and waited for through a Work that turns a lost
// peer into PeerFailure and honours an abort.
#include "ddp/process_group.h"

#include <sched.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "message_text.h"
#include "process_group/backends.h"
#include "process_group/group_state.h"
#include "torch_compat.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

// Python's names for the dtypes collectives move ("float32"), for the flight record.
std::string dtype_name(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return "float32";
    case c10::ScalarType::Double:
      return "float64";
    case c10::ScalarType::Half:
      return "float16";
    case c10::ScalarType::BFloat16:
      return "bfloat16";
    case c10::ScalarType::Long:
      return "int64";
    case c10::ScalarType::Int:
      return "int32";
    case c10::ScalarType::Byte:
      return "uint8";
    default:
      return c10::toString(type);
  }
}

// Records collective `seq`'s end when the backend finishes it, not when this rank waits for
// it: the record (and --trace) then shows how far it ran alongside backward.
void record_completion(c10d::Work& work, const std::shared_ptr<FlightRecorder>& recorder,
                       int64_t seq) {
  try {
    std::weak_ptr<FlightRecorder> weak = recorder;
    work.getFuture()->addCallback([weak, seq](c10::ivalue::Future& future) {
      if (auto r = weak.lock()) {
        if (future.hasError()) {
          r->fail(seq, first_line(future.tryRetrieveErrorMessage()));
        } else {
          r->complete(seq);
        }
      }
    });
  } catch (const std::exception&) {
    // A backend whose Work has no future: Work::wait() records the completion instead.
  }
}

}  // namespace

Work::Work(c10::intrusive_ptr<c10d::Work> work, std::string what, int rank,
           std::chrono::microseconds spin_before_sleep, std::shared_ptr<FlightRecorder> recorder,
           int64_t seq, std::shared_ptr<const GroupAbort> abort)
    : work_(std::move(work)),
      recorder_(std::move(recorder)),
      seq_(seq),
      what_(std::move(what)),
      rank_(rank),
      spin_before_sleep_(spin_before_sleep),
      abort_(std::move(abort)) {}
Work::Work(Work&&) noexcept = default;
Work& Work::operator=(Work&&) noexcept = default;
Work::~Work() = default;

void Work::wait() {
  if (!work_) return;
  if (abort_) {
    // Poll, so that an abort ends the wait; 100 us adds little to a step's few waits.
    while (!work_->isCompleted()) {
      if (abort_->set) {
        failed(PeerFailure(c10::str("rank ", rank_, ": ", what_, " abandoned: ", abort_->why())));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  try {
    // Poll first (see ProcessGroupOptions::spin_before_sleep); sched_yield() lets any other
    // runnable thread of this core go first, so the poll takes no time from ranks sharing it.
    const auto spin_until = Clock::now() + spin_before_sleep_;
    while (!work_->isCompleted() && Clock::now() < spin_until) sched_yield();
    work_->wait();
  } catch (const c10::Error& e) {
    failed(PeerFailure(c10::str("rank ", rank_, ": ", what_,
                                " failed: ", first_line(e.what_without_backtrace()),
                                " (a peer rank exited, or stopped answering within the timeout)")));
  } catch (const std::exception& e) {
    if (backends::is_broken_connection(e)) {
      failed(PeerFailure(c10::str("rank ", rank_, ": ", what_, " failed: ", first_line(e.what()),
                                  " (a peer rank exited or its connection broke)")));
    }
    failed(
        DistributedError(c10::str("rank ", rank_, ": ", what_, " failed: ", first_line(e.what()))));
  }
  if (recorder_) recorder_->complete(seq_);  // where the backend's future did not already
  work_.reset();
  if (finish_) {
    auto finish = std::move(finish_);
    finish_ = nullptr;
    finish();
  }
}

template <typename E>
void Work::failed(const E& error) {
  if (recorder_) {
    recorder_->fail(seq_, error.what());  // the whole message stays in the record
    recorder_->dump(c10::str(what_, " #", seq_, " failed"));
  }
  throw error;
}

Work Work::then(std::function<void()> finish) && {
  if (finish_) {  // after the step already there
    finish = [first = std::move(finish_), then = std::move(finish)] {
      first();
      then();
    };
  }
  finish_ = std::move(finish);
  return std::move(*this);
}

// NCCL moves device tensors only; the CPU tensors ddp.cpp exchanges (flags, counts, fingerprints)
// go through a device copy. Gloo and MPI take CPU tensors as they are.
bool ProcessGroup::needs_device_copy(const torch::Tensor& tensor) const {
  return device_.is_cuda() && tensor.device() != device_;
}

Work ProcessGroup::through_device(torch::Tensor& tensor,
                                  const std::function<Work(torch::Tensor&)>& collective) {
  torch::Tensor on_device = tensor.to(device_);
  Work work = collective(on_device);
  return std::move(work).then([tensor, on_device]() mutable { tensor.copy_(on_device); });
}

Work ProcessGroup::allreduce(torch::Tensor& tensor, CollectiveTag tag) {
  if (needs_device_copy(tensor)) {
    return through_device(tensor, [this, tag](torch::Tensor& t) { return allreduce(t, tag); });
  }
  if (tensor.scalar_type() == torch::kBFloat16 && !backend_impl_->reduces_bfloat16) {
    // Gather every rank's bfloat16 bits (seen as half: a backend that cannot reduce bfloat16
    // may not move it either, as Gloo 1.13 moves neither bfloat16 nor int16, and a gather only
    // copies the bytes) and sum locally in float; for two ranks the same bytes on the wire as a
    // ring all-reduce.
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < size_; ++r) outputs[0].push_back(torch::empty_like(tensor));
    std::vector<at::Tensor> bits{tensor.contiguous().view(torch::kHalf)};
    std::vector<std::vector<at::Tensor>> output_bits(1);
    for (auto& o : outputs[0]) output_bits[0].push_back(o.view(torch::kHalf));
    const int64_t seq = begin("all-reduce", tensor, tag);
    auto work = backend_impl_->group->allgather(output_bits, bits);
    return track(std::move(work), "all-reduce(bfloat16)", seq).then([outputs, tensor]() mutable {
      torch::Tensor sum = outputs[0][0].to(torch::kFloat);
      for (size_t r = 1; r < outputs[0].size(); ++r) sum.add_(outputs[0][r]);
      tensor.copy_(sum);
    });
  }
  const int64_t seq = begin("all-reduce", tensor, tag);
  std::vector<at::Tensor> tensors{tensor};
  return track(backend_impl_->group->allreduce(tensors), "all-reduce", seq);
}

Work ProcessGroup::allreduce_max(torch::Tensor& tensor) {
  if (needs_device_copy(tensor)) {
    return through_device(tensor, [this](torch::Tensor& t) { return allreduce_max(t); });
  }
  const int64_t seq = begin("all-reduce(max)", tensor);
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MAX;
  return track(backend_impl_->group->allreduce(tensors, opts), "all-reduce(max)", seq);
}

namespace {

// Whether c10d's backends all have all_gather_single and reduce_scatter_single. Before 2.14 they
// were _allgather_base and _reduce_scatter_base, which Gloo lacked (1.13) or had only in some
// 2.x releases; there Gloo takes the list forms below, which every version has.
constexpr bool kSingleCollectives = DDP_TORCH_AT_LEAST(2, 14);

void check_single_shapes(const char* op, const torch::Tensor& output, const torch::Tensor& input,
                         int64_t output_numel, int64_t input_numel) {
  if (!output.is_contiguous() || !input.is_contiguous() ||
      output.scalar_type() != input.scalar_type() || output.numel() != output_numel ||
      input.numel() != input_numel) {
    throw InvalidArgument(
        c10::str(op, ": expected contiguous tensors of one dtype with ", output_numel,
                 " output and ", input_numel, " input elements, got ", output.numel(), " ",
                 output.scalar_type(), " and ", input.numel(), " ", input.scalar_type()));
  }
}

}  // namespace

Work ProcessGroup::all_gather_single(torch::Tensor& output, torch::Tensor& input) {
  check_single_shapes("all_gather_single", output, input, input.numel() * size_, input.numel());
  if (needs_device_copy(input) || needs_device_copy(output)) {
    torch::Tensor out = torch::empty(output.sizes(), output.options().device(device_));
    torch::Tensor in = input.to(device_);
    return all_gather_single(out, in).then([output, out]() mutable { output.copy_(out); });
  }
  const int64_t seq = begin("all-gather(single)", input);
  if (kSingleCollectives || backend_ != "gloo") {
#if DDP_TORCH_AT_LEAST(2, 14)
    auto work = backend_impl_->group->all_gather_single(output, input);
#else
    auto work = backend_impl_->group->_allgather_base(output, input);
#endif
    return track(std::move(work), "all-gather(single)", seq);
  }
  // Gloo before 2.14: the list form into views of `output` (as half where bfloat16: Gloo 1.13
  // moves no bfloat16, and a gather only copies bytes).
  const bool as_half = input.scalar_type() == torch::kBFloat16;
  std::vector<at::Tensor> inputs{as_half ? input.view(torch::kHalf) : input};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (auto& part : output.view({size_, -1}).unbind(0)) {
    outputs[0].push_back(as_half ? part.view(torch::kHalf) : part);
  }
  return track(backend_impl_->group->allgather(outputs, inputs), "all-gather(single)", seq);
}

Work ProcessGroup::reduce_scatter_single(torch::Tensor& output, torch::Tensor& input,
                                         Reduction op) {
  check_single_shapes("reduce_scatter_single", output, input, output.numel(),
                      output.numel() * size_);
  if (needs_device_copy(input) || needs_device_copy(output)) {
    torch::Tensor out = torch::empty(output.sizes(), output.options().device(device_));
    torch::Tensor in = input.to(device_);
    return reduce_scatter_single(out, in, op).then([output, out]() mutable { output.copy_(out); });
  }
  const bool native_average = op == Reduction::kAverage && backend_ == "nccl";
  const auto divide = [this, op, native_average, output]() {
    if (op == Reduction::kAverage && !native_average) output.div_(size_);
  };
  if (!kSingleCollectives && backend_ == "gloo") {
    // Gloo before 2.14 has no reduce-scatter: all-reduce a copy and keep this rank's slice.
    torch::Tensor sum = input.clone();
    return allreduce(sum).then([this, sum, output, divide]() mutable {
      output.copy_(sum.view({size_, -1})[rank_].view(output.sizes()));
      divide();
    });
  }
  const int64_t seq =
      begin(op == Reduction::kSum ? "reduce-scatter" : "reduce-scatter(avg)", input);
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = native_average ? c10d::ReduceOp::AVG : c10d::ReduceOp::SUM;
#if DDP_TORCH_AT_LEAST(2, 14)
  auto work = backend_impl_->group->reduce_scatter_single(output, input, opts);
#else
  auto work = backend_impl_->group->_reduce_scatter_base(output, input, opts);
#endif
  return track(std::move(work), "reduce-scatter", seq).then(divide);
}

Work ProcessGroup::broadcast(torch::Tensor& tensor, int root) {
  if (needs_device_copy(tensor)) {
    return through_device(tensor, [this, root](torch::Tensor& t) { return broadcast(t, root); });
  }
  const int64_t seq = begin(c10::str("broadcast(root ", root, ")"), tensor);
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  return track(backend_impl_->group->broadcast(tensors, opts), "broadcast", seq);
}

std::vector<torch::Tensor> ProcessGroup::allgather(const torch::Tensor& tensor) {
  if (needs_device_copy(tensor)) {
    std::vector<torch::Tensor> gathered = allgather(tensor.to(device_));
    for (auto& t : gathered) t = t.to(tensor.device());
    return gathered;
  }
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < size_; ++r) outputs[0].push_back(torch::empty_like(tensor));
  const int64_t seq = begin("all-gather", tensor);
  std::vector<at::Tensor> inputs{tensor};
  track(backend_impl_->group->allgather(outputs, inputs), "all-gather", seq).wait();
  return outputs[0];
}

void ProcessGroup::barrier() {
  const int64_t seq = begin("barrier", torch::Tensor());
  track(backend_impl_->group->barrier(), "barrier", seq).wait();
}

int64_t ProcessGroup::begin(const std::string& op, const torch::Tensor& tensor, CollectiveTag tag) {
  if (aborted())
    throw PeerFailure(c10::str("rank ", rank_, ": ", op, " on an aborted group: ", abort_->why()));
  std::string dtype = "none";
  std::vector<int64_t> shape;
  if (tensor.defined()) {
    dtype = dtype_name(tensor.scalar_type());
    shape = tensor.sizes().vec();
  }
  const int64_t seq = recorder_->issue(op, dtype, shape, tag.bucket);
  if (debug_collectives_) {
    CollectiveRecord call;
    call.op = op;
    call.dtype = dtype;
    call.shape = shape;
    try {
      check_same_collective(seq, call.signature());
    } catch (const std::exception& e) {
      recorder_->fail(seq, e.what());
      recorder_->dump(c10::str("collective #", seq, " failed the check across ranks"));
      throw;
    }
  }
  return seq;
}

Work ProcessGroup::track(c10::intrusive_ptr<c10d::Work> work, std::string what, int64_t seq) const {
  if (recorder_->keeps_records()) record_completion(*work, recorder_, seq);
  return Work(std::move(work), std::move(what), rank_, spin_before_sleep_, recorder_, seq, abort_);
}

}  // namespace ddp

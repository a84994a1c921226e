#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include "ddp/atomic_file.h"
#include "ddp/checkpoint/checkpoint.h"
#include "ddp/error.h"
#include "ddp/fault_tolerance/fault_tolerance.h"
#include "ddp/sampler.h"
#include "flag_hint.h"
#include "recovery/recovery.h"
#include "train/evaluation.h"
#include "train/training.h"

namespace ddp::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The training sampler's options: shuffled by --seed, padded unless --no-pad.
SamplerOptions sampler_options(const TrainOptions& o) {
  return SamplerOptions().shuffle(true).seed(o.seed).drop_last(false).pad(!o.no_pad);
}

// The steps an epoch of `batches` batches takes: all of them, or --max-steps.
int64_t steps_of(const TrainOptions& o, int64_t batches) {
  return o.max_steps > 0 ? std::min(o.max_steps, batches) : batches;
}

// Optimizer steps per epoch: rank 0's (it has the most), the same count on every rank, so the
// learning-rate schedule agrees.
int64_t steps_per_epoch(const TrainOptions& o, int64_t dataset_size, int world_size) {
  const DistributedSampler rank0(dataset_size, world_size, 0, sampler_options(o));
  return steps_of(o, (rank0.num_samples() + o.batch_size - 1) / o.batch_size);
}

// True when every gradient is finite: one reduction (NaN and infinity propagate through a sum).
bool gradients_finite(torch::nn::Module& model) {
  torch::Tensor total;  // on the gradients' device
  for (const auto& p : model.parameters()) {
    if (!p.grad().defined()) continue;
    const torch::Tensor sum = p.grad().sum(torch::kFloat64);
    total = total.defined() ? total + sum : sum;
  }
  return !total.defined() || std::isfinite(total.item<double>());
}

// The end of a phase of the step. On a GPU the host only queues the work, so with `exact` the
// host waits for the GPU first, and the phase times mean the same as on a CPU; without it they
// are the times the host took to queue each phase, and the GPU runs on while the host queues the
// next: waiting five times a step cost speed at small batches (--step-trace asks for exact).
Clock::time_point now_after(torch::Device device, bool exact) {
  if (exact && device.is_cuda()) torch::cuda::synchronize(device.index());
  return Clock::now();
}

// A checkpoint (explicit, or the newest after a launcher restart), a state dict, or the seeded
// initial weights. Every rank reads the same file.
Position restore(const TrainOptions& o, const TrainingSetup& s, TrainOptimizer& optimizer) {
  std::string resume = o.resume;
  if (resume.empty() && s.world.restart_count > 0 && !o.checkpoint_dir.empty()) resume = "auto";
  if (resume == "auto") resume = latest_checkpoint(o.checkpoint_dir);
  if (resume.empty()) {
    if (!o.init_from.empty()) {
      load_state_dict(*s.model, read_state_dict(o.init_from), o.init_from);
      if (s.is_root()) std::printf("initial weights from %s\n", o.init_from.c_str());
    }
    return {};
  }
  const CheckpointState state =
      with_flag_hint("--resume, --optimizer; a plain state dict goes to --init-from",
                     [&] { return optimizer.load(resume, *s.model); });
  if (state.rng_state.defined()) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(state.rng_state);
  }
  if (s.is_root()) {
    std::printf("resumed from %s after epoch %lld\n", resume.c_str(), (long long)state.epoch);
    if (state.world_size != s.world.world_size) {
      std::printf(
          "note: the checkpoint was written with world size %lld, this run has %d: the data is "
          "re-sharded, so the result is not bit-identical to an uninterrupted run%s\n",
          (long long)state.world_size, s.world.world_size,
          state.step_in_epoch > 0 ? "; the rest of its epoch is shared out over this world" : "");
    } else if (state.step_in_epoch > 0) {
      std::printf("  and %lld step(s) into epoch %lld: training goes on from the next one\n",
                  (long long)state.step_in_epoch, (long long)state.epoch + 1);
    }
  }
  return position_from(state, s.world.world_size, o.batch_size);
}

// One epoch's running totals on this rank.
struct EpochTotals {
  StepTimes times;
  int64_t skipped_steps = 0;
  int64_t overflowed_steps = 0;  // --precision fp16: skipped by the loss scaler
  int64_t images = 0;
  torch::Tensor loss_sum;  // on the device: read once at the end of the epoch
};

// One global step's update, once the gradients are averaged: every rank sees the same average,
// so every rank reaches the same verdict on it. A non-finite gradient stops the job (with
// `stop_message()`) or, with --on-nan skip, consumes the step without an update. Under
// --precision fp16 the loss scaler looks for overflow itself, after unscaling: a skipped step
// is how loss scaling works, not a divergence. Returns whether the step's loss counts.
bool update(Training& t, EpochTotals& totals, const std::function<std::string()>& stop_message) {
  const bool finite = t.optimizer->scales_loss() || gradients_finite(t.model->module());
  if (!finite) {
    if (t.options.on_nan == OnNan::kStop) throw Error(stop_message());
    ++totals.skipped_steps;
    ++t.global_step;
    t.optimizer->zero_grad();
  } else if (!t.optimizer->step(t.global_step++)) {
    ++totals.overflowed_steps;
  }
  t.recovery->step_done();
  return finite;
}

// A finished step's times, to --step-trace, --trace and the straggler report.
void observe_step(Training& t, const StepTrace::Step& s) {
  t.trace->write(s);
  // Compute: all of the step but the waits for the batch and for the gradients' all-reduce.
  t.stragglers.step(seconds_between(s.batch_ready, s.backward_done) +
                    seconds_between(s.averaged, s.done));
  if (!t.chrome_trace->enabled()) return;
  t.chrome_trace->span("step", s.start, s.done, s.global_step);
  t.chrome_trace->span("data wait", s.start, s.batch_ready, s.global_step);
  t.chrome_trace->span("forward", s.batch_ready, s.forward_done, s.global_step);
  t.chrome_trace->span("backward", s.forward_done, s.backward_done, s.global_step);
  t.chrome_trace->span("all-reduce wait", s.backward_done, s.averaged, s.global_step);
  t.chrome_trace->span("optimizer", s.averaged, s.done, s.global_step);
}

// What became of one step.
struct StepOutcome {
  Clock::time_point start;   // of the step
  bool end_of_data = false;  // no batch was left: nothing happened
  bool committed = true;     // the step counts (--on-failure continue: every rank's went well)
  bool regroup = false;      // --on-failure continue: the ranks change before the next step
};

// Forward and backward (the gradients' all-reduce overlaps it); returns the loss, sets
// `forward_done` and `exposed` (the all-reduce's wait). Under --on-failure continue a lost
// peer's PeerFailure is this rank's vote against the step, whose outcome is every rank's verdict.
torch::Tensor forward_backward(Training& t, const data::Batch& batch, bool exact,
                               Clock::time_point& forward_done, double& exposed,
                               StepOutcome& outcome) {
  torch::Tensor loss;
  bool ok = true;
  try {
    loss = torch::nn::functional::cross_entropy(t.model->forward(batch.images), batch.labels);
    t.fault.at_loss(t.global_step + 1, t.setup.world.rank, loss);
    forward_done = now_after(t.setup.device, exact);
    t.optimizer->zero_grad();
    t.optimizer->scaled(loss).backward();
    exposed = t.model->exposed_wait_seconds();
  } catch (const PeerFailure&) {
    if (!t.recovery->survives_peer_failure()) throw;
    ok = false;
  }
  const StepVerdict verdict = t.recovery->vote(ok);
  outcome.committed = verdict.commit;
  outcome.regroup = verdict.reconfigure;
  if (!verdict.commit) t.optimizer->zero_grad();
  return loss;
}

// One training step on one batch: forward, backward, update.
StepOutcome train_step(Training& t, EpochTotals& totals, int epoch, int64_t step) {
  const int rank = t.setup.world.rank;
  const torch::Device device = t.setup.device;
  const bool exact = t.trace->enabled() || t.chrome_trace->enabled();  // see now_after()
  const auto t0 = Clock::now();
  if (t.setup.group) t.setup.group->recorder().set_step(t.global_step + 1);
  std::optional<data::Batch> batch = t.loader->next();
  if (!batch) return {t0, true};
  batch->to(device);
  const auto t1 = now_after(device, exact);
  StepOutcome outcome{t0};
  double exposed = 0;
  Clock::time_point t2;
  const torch::Tensor loss = forward_backward(t, *batch, exact, t2, exposed, outcome);
  if (!outcome.committed) return outcome;
  const auto t3 = now_after(device, exact);
  const bool updated = update(t, totals, [&] {
    const double value = loss.item<double>();
    return c10::str("rank ", rank, ": non-finite ", std::isfinite(value) ? "gradient" : "loss",
                    " (loss ", value, ") at epoch ", epoch, " step ", step + 1,
                    "; stopped before the optimizer step, so the weights are the last finite "
                    "ones. Lower --lr, or pass --on-nan skip");
  });
  if (!updated) return outcome;  // the batch is consumed, only the update is skipped
  const auto t4 = now_after(device, exact);
  totals.times.data_wait += seconds_between(t0, t1);
  totals.times.forward += seconds_between(t1, t2);
  totals.times.backward += seconds_between(t2, t3) - exposed;
  totals.times.comm_exposed += exposed;
  totals.times.optimizer += seconds_between(t3, t4);
  const auto backward_done =
      t3 - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(exposed));
  observe_step(t, {epoch, t.global_step, t0, t1, t2, backward_done, t3, t4});
  const int64_t count = batch->labels.size(0);
  totals.loss_sum += loss.detach().to(torch::kFloat64) * double(count);
  totals.images += count;
  t.reporter->step(epoch, t.earlier_steps + step, t.global_step, loss, t.optimizer->lr(),
                   totals.images);
  return outcome;
}

// --checkpoint-every-steps: after `steps_taken` steps of `steps`, a snapshot written in the
// background (an epoch's last step leaves it to the epoch's checkpoint).
void checkpoint_step_if_due(Training& t, int epoch, int64_t steps_taken, int64_t steps) {
  const int64_t every = t.options.checkpoint_every_steps;
  if (every <= 0 || t.global_step % every != 0 || steps_taken >= steps) return;
  const auto start = Clock::now();
  const std::string path =
      checkpoint_path(t.options.checkpoint_dir, epoch - 1, t.earlier_steps + steps_taken);
  t.optimizer->save_async(*t.step_checkpoints, path, *t.setup.model,
                          position_of(t, epoch, steps_taken, false), t.setup.is_root());
  t.chrome_trace->span(c10::str("checkpoint snapshot at step ", t.global_step), start,
                       Clock::now());
}

// One epoch of training, from where `from` says when it is the run's first (a mid-epoch
// checkpoint's place); returns its report (without the evaluation), the same on every rank.
EpochReport train_epoch(Training& t, int epoch, const Position& from) {
  const TrainOptions& o = t.options;
  const bool resumed = epoch == from.epoch;
  const int64_t first_step = resumed ? from.step_in_epoch : 0;
  const int64_t taken = resumed ? from.taken_in_epoch : 0;
  t.taken_in_epoch = taken;
  t.earlier_steps = resumed ? from.earlier_steps : 0;
  const int64_t bad_before = t.loader->bad_samples();
  // This world's shard (under --on-failure continue the world may have changed since).
  start_epoch_shard(t, epoch, first_step);
  int64_t steps = steps_of(o, t.loader->num_batches());
  if (taken > 0 && t.setup.is_root()) {
    std::printf(
        "epoch %d: %lld of its samples were trained at another world size; the other %lld are "
        "shared out over these %d ranks: %lld steps of %lld per rank (global batch %lld)\n",
        epoch, (long long)taken, (long long)(int64_t(t.setup.data.train->size()) - taken),
        t.setup.world.world_size, (long long)steps, (long long)o.batch_size,
        (long long)(o.batch_size * t.setup.world.world_size));
  }
  EpochTotals totals;
  totals.loss_sum = torch::zeros({}, torch::dtype(torch::kFloat64).device(t.setup.device));
  // --no-pad: a rank out of batches shadows the others' steps, optimizer step included, so
  // weights and optimizer state stay identical everywhere.
  const std::unique_ptr<Join> join = t.model->join_when_out_of_data(o.no_pad, [&] {
    update(t, totals, [&] {
      return c10::str("rank ", t.setup.world.rank, ": non-finite gradient at epoch ", epoch,
                      " (averaged from the ranks still training; this one had joined)");
    });
  });
  t.reporter->start_epoch(epoch, t.earlier_steps + steps);
  const auto start = Clock::now();
  for (int64_t step = first_step; step < steps;) {
    const StepOutcome outcome = train_step(t, totals, epoch, step);
    if (outcome.end_of_data) break;
    if (outcome.committed) checkpoint_step_if_due(t, epoch, ++step, steps);
    if (outcome.regroup) {  // --on-failure continue: the rest of the epoch on other ranks
      t.recovery->next_generation(epoch, step, !outcome.committed, outcome.start);
      step = 0;
      steps = steps_of(o, t.loader->num_batches());
      if (o.max_steps > 0)
        steps = std::max<int64_t>(0, std::min(steps, o.max_steps - t.earlier_steps));
      t.reporter->start_epoch(epoch, t.earlier_steps + steps);
    }
  }
  if (join) join->join();                  // shadowed steps count in global_step too
  t.taken_in_epoch = t.earlier_steps = 0;  // the epoch is whole
  const double local_seconds = seconds_between(start, Clock::now());
  EpochReport report;
  t.recovery->run_phase(epoch, [&] {
    ProcessGroup* group = t.setup.group.get();
    // The job's epoch ends when its last rank's does: with DDP the ranks finish within a step of
    // each other, under --no-sync-baseline they drift apart, and the slowest one is the pace.
    const double seconds = max_over_ranks(group, local_seconds);
    std::vector<double> sums = {totals.loss_sum.item<double>(), double(totals.images),
                                double(t.loader->bad_samples() - bad_before)};
    sum_over_ranks(group, sums);
    report.result.epoch = epoch;
    report.result.train_loss = sums[1] > 0 ? sums[0] / sums[1] : 0;
    report.result.seconds = seconds;
    report.result.images_per_second = seconds > 0 ? sums[1] / seconds : 0;
    report.train_images = int64_t(sums[1]);
    report.bad_samples = int64_t(sums[2]);
    report.stragglers = t.stragglers.end_epoch(group);
  });
  report.times = totals.times;
  report.skipped_steps = totals.skipped_steps;
  report.overflowed_steps = totals.overflowed_steps;
  report.loss_scale = t.optimizer->loss_scale();
  report.comm_bytes_per_step = t.model->bytes_communicated_per_step();
  return report;
}

void add_evaluation(const Training& t, EpochResult& r) {
  const auto start = Clock::now();
  const Evaluation e = evaluate(t.setup);
  t.chrome_trace->span("evaluation", start, Clock::now());
  r.test_loss = e.loss;
  r.test_acc = e.accuracy;
  r.test_images = e.total;
  r.class_accuracy = e.class_accuracy;
}

// Optimizer memory: rank 0's state, and (said once, with --zero) all ranks' together, which is
// the unsharded size. A collective.
double optimizer_state_mb(const Training& t, bool first_epoch) {
  std::vector<double> state_mb = {double(t.optimizer->local_state_bytes()) / 1e6};
  const double rank0 = state_mb[0];
  sum_over_ranks(t.setup.group.get(), state_mb);
  if (t.optimizer->sharded() && t.setup.is_root() && first_epoch) {
    std::printf("optimizer state (--zero): %.2f MB on rank 0, %.2f MB over all %d ranks\n", rank0,
                state_mb[0], t.setup.world.world_size);
  }
  return rank0;
}

void checkpoint_if_due(const Training& t, int epoch) {
  const TrainOptions& o = t.options;
  if (o.checkpoint_dir.empty() || (epoch % o.checkpoint_every != 0 && epoch != o.epochs)) return;
  const auto start = Clock::now();
  t.step_checkpoints->wait();  // the last step checkpoint first: one writer of the folder
  const CheckpointState state = position_of(t, epoch, 0, true);
  const bool root = t.setup.is_root();
  // A rank missing here is named, instead of the save's collectives timing out. (Under
  // --on-failure continue a lost rank is the heartbeat's to find: this barrier would not abort.)
  if (t.setup.group && !t.setup.ft)
    t.setup.group->monitored_barrier(to_ms(o.timeout), c10::str("checkpoint of epoch ", epoch));
  t.optimizer->save(checkpoint_path(o.checkpoint_dir, epoch), *t.setup.model, state, root);
  if (root) prune_checkpoints(o.checkpoint_dir, o.keep);
  // Nobody goes on (or reads the checkpoint) before it is complete.
  if (t.setup.group) t.setup.group->barrier();
  t.chrome_trace->span(c10::str("checkpoint of epoch ", epoch), start, Clock::now());
}

}  // namespace

void start_epoch_shard(Training& t, int epoch, int64_t first_step) {
  const WorldInfo& world = t.setup.world;
  *t.sampler = DistributedSampler(int64_t(t.setup.data.train->size()), world.world_size, world.rank,
                                  t.sampler->options());
  t.sampler->set_epoch_remainder(epoch - 1, t.taken_in_epoch);
  t.loader->start_epoch(t.sampler->indices(), epoch - 1, first_step);
}

CheckpointState position_of(const Training& t, int epoch, int64_t steps_taken, bool epoch_done) {
  CheckpointState state;
  const bool mid_epoch = !epoch_done;
  state.epoch = mid_epoch ? epoch - 1 : epoch;
  state.step_in_epoch = steps_taken;
  state.taken_in_epoch = mid_epoch ? t.taken_in_epoch : 0;
  state.earlier_steps_in_epoch = mid_epoch ? t.earlier_steps : 0;
  state.global_step = t.global_step;
  state.world_size = t.setup.world.world_size;
  state.config = config_text(t.options);
  state.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  return state;
}

Position position_from(const CheckpointState& state, int world_size, int64_t batch_size) {
  const bool same_world = state.world_size == world_size;
  const int64_t taken =
      state.taken_in_epoch + (same_world ? 0 : state.step_in_epoch * batch_size * state.world_size);
  const int64_t earlier = state.earlier_steps_in_epoch + (same_world ? 0 : state.step_in_epoch);
  return {int(state.epoch) + 1, same_world ? state.step_in_epoch : 0, state.global_step, taken,
          earlier};
}

std::vector<EpochResult> run_training(const TrainOptions& o, const WorldInfo& world) {
  const auto started = Clock::now();
  // The output files first: a path that cannot be written fails before start-up's work. (A
  // newcomer of --on-failure continue is never rank 0: it reports nothing.)
  const bool newcomer = FaultTolerantGroup::is_newcomer(world);
  Reporter reporter(o, newcomer ? -1 : world.rank, world.world_size);
  StepTrace trace(o.step_trace, world.rank);
  ChromeTrace chrome_trace(o.trace, world.rank);
  // A malformed DDP_FAULT fails before start-up; a newcomer does not repeat the fault of the
  // rank it replaces.
  const Fault fault = newcomer ? Fault() : Fault::from_environment();
  TrainingSetup s = set_up_training(o, world);
  if (newcomer && !s.ft) {
    std::printf("the job finished before this newcomer was admitted\n");
    return {};
  }
  const int64_t train_size = int64_t(s.data.train->size());
  // The learning-rate schedule keeps the first world's epoch length (a newcomer takes it from
  // rank 0 with the state).
  const int64_t epoch_steps = steps_per_epoch(o, train_size, s.world.world_size);
  TrainOptimizer optimizer(o, *s.model, s.group, epoch_steps);
  // A newcomer takes the state from a peer instead (Recovery::begin).
  Position start = s.newcomer ? Position{} : restore(o, s, optimizer);
  if (!o.checkpoint_dir.empty() && s.is_root()) make_directories(o.checkpoint_dir);
  TrainedModel model(o, s);
  DistributedSampler sampler(train_size, s.world.world_size, s.world.rank, sampler_options(o));
  data::Loader loader(s.data.train, s.loader_options);
  if (s.group) chrome_trace.watch(s.group->recorder());
  reporter.set_class_names(s.data.class_names);
  reporter.start();
  AsyncCheckpointWriter step_checkpoints(o.keep);
  Training t(o, s);
  t.model = &model;
  t.optimizer = &optimizer;
  t.sampler = &sampler;
  t.loader = &loader;
  t.trace = &trace;
  t.chrome_trace = &chrome_trace;
  t.reporter = &reporter;
  t.step_checkpoints = &step_checkpoints;
  t.fault = fault;
  t.global_step = start.global_step;
  const std::unique_ptr<Recovery> recovery = Recovery::for_run(t, started);
  t.recovery = recovery.get();
  start = recovery->begin(start);
  t.global_step = start.global_step;
  std::vector<EpochResult> results;
  for (int epoch = start.epoch; epoch <= o.epochs; ++epoch) {
    EpochReport report = train_epoch(t, epoch, start);
    recovery->run_phase(epoch, [&] {
      if (!o.no_eval) add_evaluation(t, report.result);
      report.optimizer_state_mb = optimizer_state_mb(t, epoch == start.epoch);
    });
    reporter.end_epoch(report, t.global_step);
    results.push_back(report.result);
    recovery->run_phase(epoch, [&] { checkpoint_if_due(t, epoch); });
  }
  step_checkpoints.wait();  // a write error is the run's
  if (!o.export_path.empty() && s.is_root()) {
    export_state_dict(o.export_path, *s.model);
    std::printf("exported the model's state dict to %s\n", o.export_path.c_str());
  }
  reporter.summary(results);
  recovery->run_phase(o.epochs, [&] { chrome_trace.write(s.group.get()); });
  print_fingerprint(s.world.rank, *s.model);
  recovery->finish();
  return results;
}

void run_evaluation(const TrainOptions& o, const WorldInfo& world) {
  if (o.checkpoint.empty()) throw InvalidArgument("evaluate needs --checkpoint FILE");
  const TrainingSetup s = set_up_training(o, world);
  load_state_dict(*s.model, read_state_dict(o.checkpoint), o.checkpoint);
  const Evaluation e = evaluate(s);
  if (s.is_root()) {
    std::printf("evaluate %s: test_loss %.6f  test_acc %.2f%% (%lld images)\n",
                o.checkpoint.c_str(), e.loss, 100 * e.accuracy, (long long)e.total);
  }
}

void print_plan(const TrainOptions& o, int world_size) {
  const std::string dir = data_dir_of(o);
  const TrainingData data = open_training_data(o, dir);
  const int64_t train_size = int64_t(data.train->size());
  std::printf("configuration:\n%s", config_text(o).c_str());
  const DistributedSampler sampler(train_size, world_size, 0, sampler_options(o));
  const int64_t steps = steps_per_epoch(o, train_size, world_size);
  std::printf("plan: %d rank(s); %s\n", world_size, data.train_description.c_str());
  std::printf(
      "  %s: %lld training images per epoch (%lld padded in all), %lld steps of %lld, "
      "%lld images per step over all ranks\n",
      o.no_pad ? "rank 0 (--no-pad: later ranks may have one image fewer)" : "each rank",
      (long long)sampler.num_samples(), (long long)(sampler.total_size() - train_size),
      (long long)steps, (long long)o.batch_size, (long long)(o.batch_size * world_size));
  std::printf(
      "  %d epoch(s), %lld optimizer steps; evaluation: %s\n", o.epochs,
      (long long)(steps * o.epochs),
      o.no_eval ? "off" : c10::str(data.test->size(), " test images split over the ranks").c_str());
  if (!o.checkpoint_dir.empty()) {
    std::printf("  checkpoints every %d epoch(s) in %s, keeping %d\n", o.checkpoint_every,
                o.checkpoint_dir.c_str(), o.keep);
    if (o.checkpoint_every_steps > 0) {
      std::printf("  and every %lld steps, written in the background\n",
                  (long long)o.checkpoint_every_steps);
    }
  }
}

}  // namespace ddp::train

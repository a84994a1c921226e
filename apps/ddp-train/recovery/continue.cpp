#include "recovery/recovery.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>

#include <c10/util/StringUtil.h>

#include "ddp/environment.h"
#include "ddp/error.h"
#include "ddp/fault_tolerance/fault_tolerance.h"
#include "metrics.h"

namespace ddp::train {
namespace {

using Clock = std::chrono::steady_clock;

std::string words(const std::vector<std::string>& ids) {
  std::string text;
  for (const auto& id : ids) text += (text.empty() ? "" : " ") + id;
  return text.empty() ? "none" : text;
}

// The fault-tolerant group's generation as the set-up's group, rank and world size.
void adopt_generation(TrainingSetup& s) {
  const Membership& m = s.ft->membership();
  s.group = s.ft->group();
  s.world.rank = m.rank;
  s.world.world_size = m.size();
}

// A file of this process's own for the state in transit (the checkpoint code reads and writes
// files).
std::string state_file() {
  const char* dir = std::getenv(env::kTmpDir);
  return c10::str(dir != nullptr && *dir != '\0' ? dir : "/tmp", "/ddp-state-", ::getpid(), ".pt");
}

// The run as a checkpoint's bytes (rank 0).
std::string state_bytes(Training& t, const CheckpointState& state) {
  const std::string path = state_file();
  t.optimizer->save(path, *t.setup.model, state, /*is_root=*/true);
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  std::remove(path.c_str());
  return bytes.str();
}

CheckpointState load_state_bytes(Training& t, const std::string& bytes) {
  const std::string path = state_file();
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
    if (!out.flush()) throw IoError(c10::str("cannot write the state from rank 0 to ", path));
  }
  const CheckpointState state = t.optimizer->load(path, *t.setup.model);
  std::remove(path.c_str());
  if (state.rng_state.defined()) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(state.rng_state);
  }
  return state;
}

// Rank 0's state (in epoch `epoch`, or after it when `epoch_done`) to every rank that lacks it
// (the newcomers); returns it on those.
std::optional<CheckpointState> share_state(Training& t, int epoch, bool epoch_done) {
  ProcessGroup& group = *t.setup.group;
  const bool root = group.rank() == 0;
  torch::Tensor lacking = torch::tensor({t.has_state ? 0 : 1, root && !t.has_state ? 1 : 0});
  group.allreduce_max(lacking).wait();
  if (lacking[0].item<int>() == 0) return std::nullopt;
  if (lacking[1].item<int>() != 0) {
    throw DistributedError(
        "no rank holds the training state any more (every rank of the previous generation was "
        "lost); start the job again from its newest checkpoint (--resume auto)");
  }
  std::string bytes;
  if (root) bytes = state_bytes(t, position_of(t, epoch, 0, epoch_done));
  broadcast_bytes(group, bytes);
  // The schedule's epoch length too: the first world's, which a newcomer may not know.
  torch::Tensor epoch_steps = torch::tensor({t.optimizer->steps_per_epoch()});
  group.broadcast(epoch_steps, 0).wait();
  if (t.has_state) return std::nullopt;
  t.optimizer->set_steps_per_epoch(epoch_steps.item<int64_t>());
  CheckpointState state = load_state_bytes(t, bytes);
  t.has_state = true;
  return state;
}

// What every rank does on a new generation; may fail (PeerFailure) when another rank is lost
// meanwhile, and then runs again on the next one.
void adopt(Training& t, int epoch, bool epoch_done, std::optional<CheckpointState>& received) {
  adopt_generation(t.setup);
  if (t.chrome_trace->enabled()) t.chrome_trace->watch(t.setup.group->recorder());
  if (auto state = share_state(t, epoch, epoch_done)) received = std::move(state);
  t.model->regroup(t.options, t.setup);
}

// One line (rank 0), one metrics record and one span of the trace per change; `start`: when the
// step that ended the generation began (the change's cost runs from there).
void report_change(Training& t, int old_world, Clock::time_point start, int64_t discarded) {
  const Membership& m = t.setup.ft->membership();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (t.setup.is_root()) {
    std::printf(
        "membership change at step %lld: world size %d -> %d (generation %lld; lost: %s; "
        "joined: %s) because %s; %lld step(s) discarded, %.2f s from the step's start\n",
        (long long)t.global_step, old_world, m.size(), (long long)m.generation,
        words(m.lost).c_str(), words(m.joined).c_str(), m.cause.c_str(), (long long)discarded,
        seconds);
    std::fflush(stdout);
  }
  t.reporter->membership_change(JsonRecord()
                                    .add("event", "membership_change")
                                    .add("time", int64_t(std::time(nullptr)))  // Unix seconds
                                    .add("global_step", t.global_step)
                                    .add("generation", m.generation)
                                    .add("old_world", old_world)
                                    .add("new_world", m.size())
                                    .add("lost", words(m.lost))
                                    .add("joined", words(m.joined))
                                    .add("cause", m.cause)
                                    .add("steps_discarded", discarded)
                                    .add("seconds", seconds));
  t.chrome_trace->span(c10::str("membership change: world size ", old_world, " -> ", m.size()),
                       start, Clock::now());
}

// --on-failure continue: every step voted on by the fault-tolerant group's members, a change
// settled in place as the group's next generation.
class ContinueRecovery : public Recovery {
 public:
  explicit ContinueRecovery(Training& t) : t_(t), ft_(*t.setup.ft) {}

  Position begin(const Position& restored) override {
    if (!t_.setup.newcomer) return restored;
    t_.has_state = false;
    std::optional<CheckpointState> received;
    ft_.settle([&] { adopt(t_, 0, false, received); });  // rank 0 is never a newcomer
    if (!received) throw DistributedError("a newcomer settled without the training state");
    const Position at = position_from(*received, t_.setup.world.world_size, t_.options.batch_size);
    std::printf(
        "rank %d: joined the running job at generation %lld (world size %d) after step %lld\n",
        t_.setup.world.rank, (long long)ft_.membership().generation, t_.setup.world.world_size,
        (long long)at.global_step);
    return at;
  }
  bool survives_peer_failure() const override { return true; }
  StepVerdict vote(bool ok) override { return ft_.vote(ok); }
  void step_done() override {}
  void next_generation(int epoch, int64_t steps_here, bool discarded,
                       Clock::time_point step_start) override {
    // The steps taken in this generation are the first ones of what is left of the epoch.
    t_.taken_in_epoch += steps_here * t_.options.batch_size * t_.setup.world.world_size;
    t_.earlier_steps += steps_here;
    const int old_world = t_.setup.world.world_size;
    ft_.reconfigure(/*admit=*/true);
    std::optional<CheckpointState> unused;
    ft_.settle([&] { adopt(t_, epoch, /*epoch_done=*/false, unused); });
    report_change(t_, old_world, step_start, discarded ? 1 : 0);
    start_epoch_shard(t_, epoch, 0);  // the rest of the epoch over this generation's ranks
  }
  void run_phase(int epoch, const std::function<void()>& phase) override {
    const int64_t generation = ft_.membership().generation;
    const int old_world = t_.setup.world.world_size;
    const auto start = Clock::now();
    std::optional<CheckpointState> unused;
    ft_.run_to_completion(phase, [&] { adopt(t_, epoch, /*epoch_done=*/true, unused); });
    // Said once the phase is done (its time included): no rank prints mid-phase.
    if (ft_.membership().generation != generation) report_change(t_, old_world, start, 0);
  }
  void finish() override { ft_.finish(); }

 private:
  Training& t_;
  FaultTolerantGroup& ft_;
};

}  // namespace

std::unique_ptr<Recovery> continue_recovery(Training& t) {
  return std::make_unique<ContinueRecovery>(t);
}

void check_fault_tolerance_options(const TrainOptions& o) {
  const std::string backend = c10::str("--backend ", to_string(o.backend));
  const bool gloo = o.backend == BackendKind::kAuto || o.backend == BackendKind::kGloo;
  // Gloo only: c10d's Gloo lets a rank walk away from a collective, NCCL's kernels do not.
  const char* flag = o.zero                ? "--zero"
                     : o.no_pad            ? "--no-pad"
                     : o.no_sync_baseline  ? "--no-sync-baseline"
                     : o.lockstep_baseline ? "--lockstep-baseline"
                     : !gloo               ? backend.c_str()
                                           : nullptr;
  if (flag != nullptr) {
    throw InvalidArgument(c10::str("--on-failure continue cannot be combined with ", flag,
                                   ": its state is tied to one group of ranks (use --on-failure "
                                   "restart, which resumes from a checkpoint)"));
  }
}

}  // namespace ddp::train

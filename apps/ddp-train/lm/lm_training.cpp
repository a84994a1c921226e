// nanoGPT's train.py in C++: random windows of the token set, micro-batches accumulated with
// the gradients communicated after the last, clipping, AdamW with decay on the weights only,
// linear warm-up then cosine decay, a validation loss every --eval-every steps.
#include "lm/lm_training.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <c10/util/StringUtil.h>

#include "ddp/checkpoint/checkpoint.h"
#include "ddp/data/tokens.h"
#include "ddp/error.h"
#include "ddp/precision.h"
#include "lm/parallel_gpt.h"
#include "metrics.h"
#include "train/training_setup.h"

namespace ddp::train {
namespace {

using Clock = std::chrono::steady_clock;

// nanoGPT's get_lr: warm-up from lr/(N+1), then a half cosine from lr to --min-lr at the last
// step (constant after the warm-up with --lr-schedule constant).
double lm_lr(const TrainOptions& o, int64_t step) {
  if (step < o.warmup_steps) return o.lr * double(step + 1) / double(o.warmup_steps + 1);
  if (o.lr_schedule != LrSchedule::kCosine || o.steps <= o.warmup_steps) return o.lr;
  const double ratio = double(step - o.warmup_steps) / double(o.steps - o.warmup_steps);
  return o.min_lr + 0.5 * (1 + std::cos(M_PI * ratio)) * (o.lr - o.min_lr);
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainOptions& o,
                                                        const ParallelGPT& model) {
  switch (o.optimizer) {
    case OptimizerKind::kAdamW: {
      auto [decay, no_decay] = model.decay_and_no_decay();
      auto options = [&o](double wd) {
        return std::make_unique<torch::optim::AdamWOptions>(
            torch::optim::AdamWOptions(o.lr).betas({0.9, o.beta2}).eps(1e-8).weight_decay(wd));
      };
      std::vector<torch::optim::OptimizerParamGroup> groups;
      groups.emplace_back(decay, options(o.weight_decay));
      groups.emplace_back(no_decay, options(0.0));
      return std::make_unique<torch::optim::AdamW>(std::move(groups), *options(o.weight_decay));
    }
    case OptimizerKind::kAdam:
      return std::make_unique<torch::optim::Adam>(
          model.parameters(),
          torch::optim::AdamOptions(o.lr).betas({0.9, o.beta2}).weight_decay(o.weight_decay));
    case OptimizerKind::kSgd:
      break;
  }
  return std::make_unique<torch::optim::SGD>(
      model.parameters(),
      torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
}

// The bytes of the optimizer's state tensors (moments, momentum buffers).
int64_t optimizer_state_tensor_bytes(torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  auto add = [&bytes](const torch::Tensor& t) {
    if (t.defined()) bytes += t.numel() * t.element_size();
  };
  for (auto& [key, state] : optimizer.state()) {
    if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(state.get())) {
      add(s->exp_avg()), add(s->exp_avg_sq()), add(s->max_exp_avg_sq());
    } else if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(state.get())) {
      add(a->exp_avg()), add(a->exp_avg_sq()), add(a->max_exp_avg_sq());
    } else if (auto* m = dynamic_cast<torch::optim::SGDParamState*>(state.get())) {
      add(m->momentum_buffer());
    }
  }
  return bytes;
}

int64_t peak_rss_bytes() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

torch::Tensor loss_of(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}).to(torch::kFloat), targets.reshape({-1}));
}

models::GPTConfig config_of(const TrainOptions& o, const data::TokenDataset& data) {
  models::GPTConfig config = models::GPTConfig::named(to_string(o.model), data.vocab_size);
  if (o.block_size > 0) config.block_size = o.block_size;
  return config;
}

}  // namespace

void print_language_model_plan(const TrainOptions& o, int world_size) {
  const data::TokenDataset data = data::TokenDataset::open(o.data_dir);
  const models::GPTConfig config = config_of(o, data);
  std::printf("configuration:\n%s", config_text(o).c_str());
  std::printf(
      "plan: %d rank(s), %s; %s data in %s: %lld train and %lld val tokens, vocabulary %lld\n",
      world_size, to_string(o.parallel).c_str(), data.format.c_str(), o.data_dir.c_str(),
      (long long)data.train.size(), (long long)data.val.size(), (long long)data.vocab_size);
  std::printf("  %s: %lld layers, %lld heads, %lld wide, context %lld\n",
              to_string(o.model).c_str(), (long long)config.n_layer, (long long)config.n_head,
              (long long)config.n_embd, (long long)config.block_size);
  std::printf(
      "  %lld optimizer steps of %lld tokens (%lld windows per rank x %lld micro-batches); "
      "validation loss every %lld steps over %lld batches per rank\n",
      (long long)o.steps, (long long)(o.batch_size * config.block_size * o.grad_accum * world_size),
      (long long)o.batch_size, (long long)o.grad_accum, (long long)o.eval_every,
      (long long)o.eval_batches);
}

namespace {

// One run: what it trains on and with, and its steps, each a function.
class LanguageModelRun {
 public:
  LanguageModelRun(const TrainOptions& o, const WorldInfo& world)
      : o_(o),
        s_(set_up_process(o, world)),
        data_(data::TokenDataset::open(o.data_dir)),
        config_(config_of(o, data_)),
        gpt_(seeded_gpt()),
        model_(gpt_, o, s_.group),
        optimizer_(make_optimizer(o, model_)),
        train_(data_.train, config_.block_size, o.batch_size, o.seed, s_.world.rank),
        // Validation windows from seeds of their own, the same at every evaluation.
        val_(data_.val, config_.block_size, o.batch_size, o.seed + 500009, s_.world.rank),
        tokens_per_step_(o.batch_size * config_.block_size * o.grad_accum * s_.world.world_size),
        metrics_(s_.is_root() ? o.metrics : std::string()) {}

  void run() {
    if (s_.is_root()) print_banner();
    if (s_.group) s_.group->monitored_barrier(to_ms(o_.timeout), "start-up");
    auto window_start = Clock::now();
    for (int64_t step = 0; step < o_.steps; ++step) {
      const auto step_start = Clock::now();
      const double lr = lm_lr(o_, step);
      const auto [loss, norm] = train_step(step, lr);
      const bool last = step + 1 == o_.steps;
      if (s_.is_root()) {
        const bool logged = (step + 1) % o_.log_every == 0 || step == 0 || last;
        if (logged) log_step(step, loss, lr, norm, window_start);
        write_step(step, loss, lr, norm, seconds_since(step_start));
        if (logged) window_start = Clock::now();
      }
      if ((o_.eval_every > 0 && (step + 1) % o_.eval_every == 0) || last) evaluate(step + 1);
    }
    report_memory();
    if (!o_.export_path.empty()) export_weights();
  }

 private:
  static double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  models::GPT seeded_gpt() const {
    torch::manual_seed(int64_t(o_.seed));
    models::GPT gpt(config_);
    if (!o_.init_from.empty()) load_state_dict(*gpt, read_state_dict(o_.init_from), o_.init_from);
    gpt->to(s_.device);
    return gpt;
  }

  // FSDP computes in its mixed-precision policy's dtype; DDP and one process under autocast.
  Precision autocast_precision() const {
    return model_.sharded() ? Precision::kFp32 : o_.precision;
  }

  void print_banner() const {
    std::printf(
        "model %s: %.2fM parameters (%.2fM without the positions), %lld layers, %lld heads, "
        "%lld wide, context %lld, vocabulary %lld (%s data, %lld train / %lld val tokens)\n",
        to_string(o_.model).c_str(), double(gpt_->num_parameters(false)) / 1e6,
        double(gpt_->num_parameters(true)) / 1e6, (long long)config_.n_layer,
        (long long)config_.n_head, (long long)config_.n_embd, (long long)config_.block_size,
        (long long)config_.vocab_size, data_.format.c_str(), (long long)data_.train.size(),
        (long long)data_.val.size());
    std::printf("%s over %d rank(s): %lld tokens per step (%lld per rank x %lld micro-batches)\n",
                s_.group ? to_string(o_.parallel).c_str() : "one process", s_.world.world_size,
                (long long)tokens_per_step_, (long long)(o_.batch_size * config_.block_size),
                (long long)o_.grad_accum);
  }

  // The micro-batches, then clipping and the optimizer; returns the loss (the mean of the
  // micro-batches', this rank's) and the gradients' norm before clipping.
  std::pair<double, double> train_step(int64_t step, double lr) {
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
    double step_loss = 0;
    for (int64_t m = 0; m < o_.grad_accum; ++m) {
      model_.set_gradient_sync(m == o_.grad_accum - 1);
      auto [x, y] = train_.batch(step * o_.grad_accum + m);
      torch::Tensor logits;
      {
        Autocast autocast(s_.device, autocast_precision());
        logits = model_.forward(x.to(s_.device));
      }
      torch::Tensor loss = loss_of(logits, y.to(s_.device)) / double(o_.grad_accum);
      loss.backward();
      step_loss += loss.item<double>();
    }
    // Every rank stops together: one rank's NaN alone would leave the others in a collective.
    if (max_over_ranks(s_.group.get(), std::isfinite(step_loss) ? 0.0 : 1.0) > 0) {
      throw DataError(c10::str("step ", step, ": the loss is not finite on some rank (", step_loss,
                               " on rank ", s_.world.rank,
                               "); lower --lr or raise --warmup-steps"));
    }
    const double norm = o_.grad_clip > 0 ? model_.clip_grad_norm(o_.grad_clip) : 0.0;
    optimizer_->step();
    state_bytes_ = std::max(state_bytes_, model_.parameter_and_gradient_bytes() +
                                              optimizer_state_tensor_bytes(*optimizer_));
    optimizer_->zero_grad();
    return {step_loss, norm};
  }

  void log_step(int64_t step, double loss, double lr, double norm, Clock::time_point since) {
    const int64_t steps = step - last_logged_step_;  // since the last line
    last_logged_step_ = step;
    std::printf("step %lld/%lld: loss %.4f, lr %.3g, grad norm %.3f, %.0f tokens/s\n",
                (long long)(step + 1), (long long)o_.steps, loss, lr, norm,
                double(tokens_per_step_ * steps) / seconds_since(since));
    std::fflush(stdout);
  }

  void write_step(int64_t step, double loss, double lr, double norm, double seconds) {
    metrics_.write(JsonRecord()
                       .add("step", step)
                       .add("loss", loss)
                       .add("lr", lr)
                       .add("grad_norm", norm)
                       .add("tokens", tokens_per_step_)
                       .add("step_seconds", seconds));
  }

  void evaluate(int64_t step) {
    torch::NoGradGuard no_grad;
    std::vector<double> sums = {0, 0};
    for (int64_t j = 0; j < o_.eval_batches; ++j) {
      auto [x, y] = val_.batch(j);
      Autocast autocast(s_.device, autocast_precision());
      sums[0] += loss_of(model_.forward(x.to(s_.device)), y.to(s_.device)).item<double>();
      sums[1] += 1;
    }
    sum_over_ranks(s_.group.get(), sums);
    const double val_loss = sums[0] / sums[1];
    if (s_.is_root()) {
      std::printf("step %lld: val loss %.4f\n", (long long)step, val_loss);
      metrics_.write(JsonRecord().add("eval_step", step).add("val_loss", val_loss));
    }
  }

  void report_memory() {
    ProcessGroup* group = s_.group.get();
    const double state = max_over_ranks(group, double(state_bytes_));
    const double unsharded = max_over_ranks(group, double(model_.peak_unsharded_bytes()));
    const double rss = max_over_ranks(group, double(peak_rss_bytes()));
    if (!s_.is_root()) return;
    char gathered[96] = "";
    if (o_.parallel == ParallelKind::kFsdp) {
      std::snprintf(gathered, sizeof gathered, ", gathered at once at most %.1f MiB",
                    unsharded / 1048576.0);
    }
    std::printf(
        "memory per rank (the largest): parameters + gradients + optimizer state %.1f MiB%s; "
        "peak resident %.1f MiB\n",
        state / 1048576.0, gathered, rss / 1048576.0);
    metrics_.write(JsonRecord()
                       .add("memory", true)
                       .add("state_bytes_per_rank", int64_t(state))
                       .add("peak_unsharded_bytes_per_rank", int64_t(unsharded))
                       .add("peak_rss_bytes_per_rank", int64_t(rss)));
  }

  void export_weights() {
    const auto state = model_.full_state_dict();  // every rank: collective under FSDP
    if (!s_.is_root()) return;
    save_tensors(o_.export_path, state);
    std::printf("exported the weights (nanoGPT's names) to %s\n", o_.export_path.c_str());
  }

  const TrainOptions& o_;
  TrainingSetup s_;
  const data::TokenDataset data_;
  const models::GPTConfig config_;
  models::GPT gpt_;
  ParallelGPT model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  const data::TokenWindows train_, val_;
  const int64_t tokens_per_step_;
  MetricsWriter metrics_;
  int64_t state_bytes_ = 0;  // parameters, gradients and optimizer state: the most after a step
  int64_t last_logged_step_ = -1;
};

}  // namespace

void run_language_model_training(const TrainOptions& o, const WorldInfo& world) {
  LanguageModelRun(o, world).run();
}

}  // namespace ddp::train

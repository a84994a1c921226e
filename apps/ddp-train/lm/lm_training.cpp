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

void run_language_model_training(const TrainOptions& o, const WorldInfo& world) {
  TrainingSetup s = set_up_process(o, world);
  const int rank = s.world.rank, ranks = s.world.world_size;
  const data::TokenDataset data = data::TokenDataset::open(o.data_dir);
  const models::GPTConfig config = config_of(o, data);
  torch::manual_seed(int64_t(o.seed));
  models::GPT gpt(config);
  if (!o.init_from.empty()) load_state_dict(*gpt, read_state_dict(o.init_from), o.init_from);
  gpt->to(s.device);
  ParallelGPT model(gpt, o, s.group);
  auto optimizer = make_optimizer(o, model);
  const data::TokenWindows train(data.train, config.block_size, o.batch_size, o.seed, rank);
  // Validation windows from their own seeds, the same at every evaluation.
  const data::TokenWindows val(data.val, config.block_size, o.batch_size, o.seed + 500009, rank);
  const int64_t tokens_per_step = o.batch_size * config.block_size * o.grad_accum * ranks;
  if (s.is_root()) {
    std::printf(
        "model %s: %.2fM parameters (%.2fM without the positions), %lld layers, %lld heads, "
        "%lld wide, context %lld, vocabulary %lld (%s data, %lld train / %lld val tokens)\n",
        to_string(o.model).c_str(), double(gpt->num_parameters(false)) / 1e6,
        double(gpt->num_parameters(true)) / 1e6, (long long)config.n_layer,
        (long long)config.n_head, (long long)config.n_embd, (long long)config.block_size,
        (long long)config.vocab_size, data.format.c_str(), (long long)data.train.size(),
        (long long)data.val.size());
    std::printf("%s over %d rank(s): %lld tokens per step (%lld per rank x %lld micro-batches)\n",
                s.group ? to_string(o.parallel).c_str() : "one process", ranks,
                (long long)tokens_per_step, (long long)(o.batch_size * config.block_size),
                (long long)o.grad_accum);
  }
  if (s.group) s.group->monitored_barrier(to_ms(o.timeout), "start-up");

  MetricsWriter metrics(s.is_root() ? o.metrics : std::string());
  auto evaluate = [&](int64_t step) {
    torch::NoGradGuard no_grad;
    std::vector<double> sums = {0, 0};
    for (int64_t j = 0; j < o.eval_batches; ++j) {
      auto [x, y] = val.batch(j);
      Autocast autocast(s.device,
                        o.parallel == ParallelKind::kDdp ? o.precision : Precision::kFp32);
      sums[0] += loss_of(model.forward(x.to(s.device)), y.to(s.device)).item<double>();
      sums[1] += 1;
    }
    sum_over_ranks(s.group.get(), sums);
    const double val_loss = sums[0] / sums[1];
    if (s.is_root()) {
      std::printf("step %lld: val loss %.4f\n", (long long)step, val_loss);
      metrics.write(JsonRecord().add("eval_step", step).add("val_loss", val_loss));
    }
  };

  int64_t state_bytes = 0;
  auto window_start = Clock::now();
  for (int64_t step = 0; step < o.steps; ++step) {
    const auto step_start = Clock::now();
    const double lr = lm_lr(o, step);
    for (auto& group : optimizer->param_groups()) group.options().set_lr(lr);
    double step_loss = 0;
    for (int64_t m = 0; m < o.grad_accum; ++m) {
      model.set_gradient_sync(m == o.grad_accum - 1);
      auto [x, y] = train.batch(step * o.grad_accum + m);
      torch::Tensor logits;
      {
        // FSDP computes in its mixed-precision policy's dtype; DDP under autocast.
        Autocast autocast(s.device,
                          o.parallel == ParallelKind::kDdp ? o.precision : Precision::kFp32);
        logits = model.forward(x.to(s.device));
      }
      torch::Tensor loss = loss_of(logits, y.to(s.device)) / double(o.grad_accum);
      loss.backward();
      step_loss += loss.item<double>();
    }
    if (!std::isfinite(step_loss)) {
      throw DataError(c10::str("step ", step, " (rank ", rank, "): the loss is ", step_loss,
                               "; lower --lr or raise --warmup-steps"));
    }
    const double norm = o.grad_clip > 0 ? model.clip_grad_norm(o.grad_clip) : 0.0;
    optimizer->step();
    state_bytes = std::max(state_bytes, model.parameter_and_gradient_bytes() +
                                            optimizer_state_tensor_bytes(*optimizer));
    optimizer->zero_grad();
    const bool last = step + 1 == o.steps;
    if (s.is_root() && ((step + 1) % o.log_every == 0 || step == 0 || last)) {
      const double seconds = std::chrono::duration<double>(Clock::now() - window_start).count();
      const int64_t steps_in_window =
          step == 0 ? 1 : ((step + 1) % o.log_every == 0 ? o.log_every : (step + 1) % o.log_every);
      const double tokens_per_second = double(tokens_per_step * steps_in_window) / seconds;
      std::printf("step %lld/%lld: loss %.4f, lr %.3g, grad norm %.3f, %.0f tokens/s\n",
                  (long long)(step + 1), (long long)o.steps, step_loss, lr, norm,
                  tokens_per_second);
      std::fflush(stdout);
    }
    if (s.is_root()) {
      const double seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
      metrics.write(JsonRecord()
                        .add("step", step)
                        .add("loss", step_loss)
                        .add("lr", lr)
                        .add("grad_norm", norm)
                        .add("tokens", tokens_per_step)
                        .add("step_seconds", seconds));
    }
    if ((step + 1) % o.log_every == 0 || step == 0) window_start = Clock::now();
    if ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || last) evaluate(step + 1);
  }

  const double peak_state = max_over_ranks(s.group.get(), double(state_bytes));
  const double peak_unsharded = max_over_ranks(s.group.get(), double(model.peak_unsharded_bytes()));
  const double peak_rss = max_over_ranks(s.group.get(), double(peak_rss_bytes()));
  if (s.is_root()) {
    char gathered[96] = "";
    if (o.parallel == ParallelKind::kFsdp) {
      std::snprintf(gathered, sizeof gathered, ", gathered at once at most %.1f MiB",
                    peak_unsharded / 1048576.0);
    }
    std::printf(
        "memory per rank (the largest): parameters + gradients + optimizer state %.1f MiB%s; "
        "peak resident %.1f MiB\n",
        peak_state / 1048576.0, gathered, peak_rss / 1048576.0);
    metrics.write(JsonRecord()
                      .add("memory", true)
                      .add("state_bytes_per_rank", int64_t(peak_state))
                      .add("peak_unsharded_bytes_per_rank", int64_t(peak_unsharded))
                      .add("peak_rss_bytes_per_rank", int64_t(peak_rss)));
  }
  if (!o.export_path.empty()) {
    const auto state = model.full_state_dict();  // every rank: collective under FSDP
    if (s.is_root()) {
      save_tensors(o.export_path, state);
      std::printf("exported the weights (nanoGPT's names) to %s\n", o.export_path.c_str());
    }
  }
}

}  // namespace ddp::train

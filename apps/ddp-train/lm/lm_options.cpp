#include "lm/lm_options.h"

#include <c10/util/StringUtil.h>

#include "ddp/error.h"

namespace ddp::train {
namespace {

using O = TrainOptions;
using cli::choice_flag;
using cli::int_flag;
using cli::real_flag;

const cli::Names<ParallelKind> kParallel = {{ParallelKind::kDdp, "ddp"},
                                            {ParallelKind::kFsdp, "fsdp"}};

}  // namespace

std::vector<cli::Flag<TrainOptions>> language_model_flags() {
  constexpr int64_t kHuge = int64_t(1) << 40;
  return {
      choice_flag<O>("--parallel", "HOW",
                     "GPTs: ddp (default): a whole replica per rank, gradients all-reduced; "
                     "fsdp: each block and the rest sharded over the ranks (FSDP2's "
                     "semantics): parameters, gradients and AdamW's state 1/N per rank",
                     &O::parallel, "parallelism", kParallel),
      int_flag<O>("--steps", "N", "GPTs: optimizer steps of the run (default 5000)", &O::steps, 1,
                  kHuge),
      int_flag<O>("--grad-accum", "N",
                  "GPTs: micro-batches of --batch-size per optimizer step, the gradients "
                  "communicated after the last only (default 1)",
                  &O::grad_accum, 1, 1 << 20),
      int_flag<O>("--block-size", "N", "GPTs: tokens of context (default: the model's)",
                  &O::block_size, 0, 1 << 20),
      real_flag<O>("--grad-clip", "X",
                   "GPTs: scale the gradients so that their global norm is at most X "
                   "(default 1; 0: no clipping)",
                   &O::grad_clip, 0, 1e9),
      real_flag<O>("--min-lr", "X",
                   "GPTs: the learning rate --lr-schedule cosine ends at (default 0)", &O::min_lr,
                   0, 1e3),
      int_flag<O>("--warmup-steps", "N",
                  "GPTs: raise the learning rate linearly over the first N steps (default 0)",
                  &O::warmup_steps, 0, kHuge),
      real_flag<O>("--beta2", "X", "GPTs: AdamW's beta2 (default 0.95)", &O::beta2, 0, 1),
      int_flag<O>("--eval-every", "N",
                  "GPTs: the validation loss every N steps and at the end (default 250; 0: "
                  "at the end only)",
                  &O::eval_every, 0, kHuge),
      int_flag<O>("--eval-batches", "N",
                  "GPTs: batches per rank in each validation loss (default 20)", &O::eval_batches,
                  1, kHuge),
  };
}

std::string to_string(ParallelKind parallel) { return cli::choice_name(parallel, kParallel); }

bool is_language_model(ModelKind model) {
  return model == ModelKind::kGptNano || model == ModelKind::kGpt2 ||
         model == ModelKind::kGpt2Medium;
}

// The GPTs train on tokens with their own loop (lm/lm_training.h), which has some of the
// image classifiers' features and not others.
void check_language_model_options(const TrainOptions& o) {
  const bool gpt = is_language_model(o.model);
  const bool tokens = o.dataset == data::DatasetKind::kTokens;
  if (gpt != tokens) {
    throw InvalidArgument(
        gpt ? c10::str("--model ", to_string(o.model), " trains on --dataset tokens --data-dir DIR")
            : c10::str("--dataset tokens is for --model gpt-nano, gpt2 or "
                       "gpt2-medium, not ",
                       to_string(o.model)));
  }
  if (!gpt) {
    if (o.parallel == ParallelKind::kFsdp) {
      throw InvalidArgument(
          "--parallel fsdp shards the GPTs' blocks (--model gpt-*); the image "
          "classifiers use DDP, with --zero to shard the optimizer state");
    }
    return;
  }
  if (o.data_dir.empty()) throw InvalidArgument("--dataset tokens needs --data-dir DIR");
  auto refuse = [&o](bool given, const char* flag, const char* why) {
    if (given) {
      throw InvalidArgument(
          c10::str(flag, " does not apply to --model ", to_string(o.model), ": ", why));
    }
  };
  refuse(!o.checkpoint_dir.empty() || !o.resume.empty(), "--checkpoint-dir/--resume",
         "the GPTs' checkpoints are not written yet; --export writes the weights at the end");
  refuse(o.zero, "--zero", "use --parallel fsdp, which shards the gradients and weights too");
  refuse(o.precision == Precision::kFp16, "--precision fp16",
         "not yet for the GPTs (bf16 is: it needs no loss scaling)");
  refuse(o.comm_hook != "allreduce", "--comm-hook",
         "the GPTs' gradients are all-reduced as they are");
  refuse(o.no_sync_baseline, "--no-sync-baseline/--lockstep-baseline",
         "benchmark flags of the CNNs");
  refuse(o.launcher.on_failure() == "continue", "--on-failure continue",
         "the GPTs' training restarts from --init-from only");
  refuse(o.optimizer == OptimizerKind::kSgd, "--optimizer sgd (the default)",
         "the GPTs train with --optimizer adamw (nanoGPT's) or adam");
  refuse(o.epochs != 10 || o.max_steps != 0 || o.warmup_epochs != 0,
         "--epochs/--max-steps/--warmup-epochs",
         "a GPT run counts optimizer steps: --steps, --warmup-steps");
  refuse(o.on_nan == OnNan::kSkip, "--on-nan skip", "a GPT run stops on a non-finite loss");
  refuse(o.parallel == ParallelKind::kFsdp && (o.bucket_cap_mb != 25 || o.first_bucket_cap_mb != 1),
         "--bucket-cap-mb/--first-bucket-cap-mb",
         "under --parallel fsdp each unit is one collective");
  refuse(o.no_pad || o.normalize || o.random_crop || o.horizontal_flip || o.channels_last,
         "--no-pad/--normalize/--random-crop/--hflip/--channels-last", "they are for images");
}

}  // namespace ddp::train

#include "options.h"

#include <c10/util/StringUtil.h>

#include "config_file.h"
#include "ddp/algorithms/comm_hook_registry.h"
#include "ddp/environment.h"
#include "ddp/error.h"
#include "elastic_flags.h"
#include "flags.h"
#include "lm/lm_options.h"
#include "option_checks.h"

namespace ddp::train {
namespace {

using O = TrainOptions;
using cli::choice_flag;
using cli::int_flag;
using cli::Names;
using cli::real_flag;
using cli::switch_flag;
using cli::text_flag;

const Names<Preset> kPresets = {{Preset::kReference, "reference"}, {Preset::kFast, "fast"}};
const Names<ModelKind> kModels = {{ModelKind::kNet, "net"},
                                  {ModelKind::kResnet, "resnet"},
                                  {ModelKind::kResnet18, "resnet18"},
                                  {ModelKind::kResnet50, "resnet50"},
                                  {ModelKind::kGptNano, "gpt-nano"},
                                  {ModelKind::kGpt2, "gpt2"},
                                  {ModelKind::kGpt2Medium, "gpt2-medium"}};
const Names<data::OnBadSample> kOnBadSample = {{data::OnBadSample::kStop, "stop"},
                                               {data::OnBadSample::kSkip, "skip"}};
const Names<OptimizerKind> kOptimizers = {
    {OptimizerKind::kSgd, "sgd"}, {OptimizerKind::kAdam, "adam"}, {OptimizerKind::kAdamW, "adamw"}};
const Names<LrSchedule> kSchedules = {{LrSchedule::kConstant, "constant"},
                                      {LrSchedule::kCosine, "cosine"}};
const Names<OnNan> kOnNan = {{OnNan::kStop, "stop"}, {OnNan::kSkip, "skip"}};
const Names<BackendKind> kBackends = {{BackendKind::kAuto, "auto"},
                                      {BackendKind::kGloo, "gloo"},
                                      {BackendKind::kNccl, "nccl"},
                                      {BackendKind::kMpi, "mpi"}};
const Names<Precision> kPrecisions = {
    {Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}, {Precision::kFp16, "fp16"}};

DeviceChoice parse_device(const std::string& v) {
  using Kind = DeviceChoice::Kind;
  if (v.rfind("cuda:", 0) == 0) {
    const bool index =
        v.size() > 5 && v.size() <= 9 && v.find_first_not_of("0123456789", 5) == std::string::npos;
    if (!index)
      throw InvalidArgument(c10::str("--device: '", v, "' is not cuda:N (N a GPU's index)"));
    return {Kind::kCuda, std::stoi(v.substr(5))};
  }
  const Names<Kind> kinds = {{Kind::kAuto, "auto"}, {Kind::kCpu, "cpu"}, {Kind::kCuda, "cuda"}};
  return {cli::parse_choice("--device", "device", v, kinds), -1};
}

// The data set's names, spellings such as cifar-10 included, are the library's.
cli::Flag<O> dataset_flag() {
  return {"--dataset", "NAME",
          "cifar10 (default), fashion-mnist, mnist, or imagefolder: your own images, "
          "DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg as ImageNet's (JPEG, PNG); "
          "tokens (for --model gpt-*): nanoGPT's train.bin and val.bin or llm.c's shards "
          "(make-data --tokens writes them)",
          [](O& o, const std::string& v) { o.dataset = data::parse_dataset_kind(v, "--dataset"); },
          [](const O& o) { return std::string(data::dataset_kind_name(o.dataset)); }};
}

cli::Flag<O> device_flag() {
  return {
      "--device", "NAME",
      c10::str("auto (default): cuda when LibTorch has CUDA and a GPU is visible, else cpu; cpu; "
               "cuda (each worker on GPU ",
               env::kLocalRank,
               " of its node); cuda:N (every worker on GPU N: workers sharing a GPU need "
               "--backend gloo, NCCL refuses them)"),
      [](O& o, const std::string& v) { o.device = parse_device(v); },
      [](const O& o) { return to_string(o.device); }};
}

// --config names the file the other keys came from: not itself part of the configuration.
cli::Flag<O> config_flag() {
  return {"--config", "FILE",
          "read flags from a TOML file: each key a flag without the dashes (lr = 0.05, "
          "batch_size = 128, no-pad = true); flags on the command line override it",
          [](O& o, const std::string& v) { o.config = v; }};
}

// --comm-hook is open (powersgd:RANK:START), checked by building the hook it names.
cli::Flag<O> comm_hook_flag() {
  auto flag = text_flag<O>(
      "--comm-hook", "NAME",
      "how gradients are averaged: allreduce (default), fp16 or bf16 (16-bit on the wire), "
      "powersgd[:RANK[:START]] (rank-RANK low-rank compression with error feedback after START "
      "plain steps; defaults 1 and 100)",
      &O::comm_hook);
  flag.set = [](O& o, const std::string& v) {
    make_comm_hook(v);  // validates
    o.comm_hook = v;
  };
  return flag;
}

cli::Flag<O> init_method_flag() {
  auto flag = text_flag<O>("--init-method", "URL",
                           "env:// (default), tcp://HOST:PORT or file:///PATH", &O::init_method);
  flag.set = [](O& o, const std::string& v) {
    if (v != "env://" && v.rfind("tcp://", 0) != 0 && v.rfind("file://", 0) != 0) {
      throw InvalidArgument(
          c10::str("--init-method: '", v, "' is not env://, tcp://HOST:PORT or file:///PATH"));
    }
    o.init_method = v;
  };
  return flag;
}

// --lockstep-baseline is --no-sync-baseline plus the wait.
cli::Flag<O> lockstep_flag() {
  auto flag = switch_flag<O>(
      "--lockstep-baseline",
      "benchmark only: like --no-sync-baseline, but the ranks wait for each other after every "
      "backward (an all-reduce of one float, no gradients): what keeping ranks in step costs by "
      "itself",
      &O::lockstep_baseline);
  flag.set = [](O& o, const std::string&) { o.no_sync_baseline = o.lockstep_baseline = true; };
  return flag;
}

// The flags, one entry each: a declarative table.
const cli::FlagTable<O>& table() {
  constexpr int64_t kHuge = int64_t(1) << 40;
  static const cli::FlagTable<O> flags = [] {
    std::vector<cli::Flag<O>> list = {
        dataset_flag(),
        text_flag<O>("--data-dir", "DIR",
                     "where the data set is (default: data for CIFAR-10 — the directory "
                     "cifar-10-batches-bin or its parent; /usr/share/datasets/fashion-mnist for "
                     "Fashion-MNIST; data/mnist for MNIST; imagefolder needs it)",
                     &O::data_dir),
        switch_flag<O>("--download",
                       "fetch CIFAR-10 into --data-dir first if it is not there (MD5-checked)",
                       &O::download),
        text_flag<O>("--download-url", "URL",
                     "where --download fetches cifar-10-binary.tar.gz from (a mirror)",
                     &O::download_url),
        text_flag<O>("--download-md5", "HEX",
                     "the MD5 the downloaded archive must have (with --download-url)",
                     &O::download_md5),
        switch_flag<O>("--normalize", "normalise each channel by the data set's mean and std",
                       &O::normalize),
        switch_flag<O>("--random-crop",
                       "random crop with zero padding 4 (seeded, per batch; the in-memory sets: "
                       "imagefolder always takes RandomResizedCrop)",
                       &O::random_crop),
        switch_flag<O>("--hflip", "random horizontal flip (seeded, per batch)",
                       &O::horizontal_flip),
        switch_flag<O>("--channels-last",
                       "keep images and conv weights in NHWC memory (faster with oneDNN)",
                       &O::channels_last),
        int_flag<O>("--image-size", "N",
                    "imagefolder: training takes RandomResizedCrop(N) + --hflip, evaluation "
                    "Resize(N*256/224) + CenterCrop(N), as torchvision's ImageNet example "
                    "(default 224)",
                    &O::image_size, 32, 4096),
        switch_flag<O>("--full-decode",
                       "imagefolder training: decode every JPEG in full, for torchvision's "
                       "pixels exactly (default: at 1/2, 1/4 or 1/8 scale where the crop is "
                       "still at least --image-size at that scale, as PIL's draft() does)",
                       &O::full_decode),
        int_flag<O>("--loader-threads", "N",
                    "threads per rank that read, decode and transform samples (default 0: one "
                    "for the in-memory sets; for imagefolder one per rank on the CPU, and the "
                    "rank's cores less one on a GPU)",
                    &O::loader_threads, 0, 1024),
        choice_flag<O>("--on-bad-sample", "WHAT",
                       "a file that cannot be read or decoded: stop (default) names it and "
                       "stops the run; skip warns once per file, counts it (bad_samples in "
                       "--metrics) and takes a deterministic other sample in its place",
                       &O::on_bad_sample, "policy", kOnBadSample),
        choice_flag<O>("--model", "NAME",
                       "net: the reference CNN (default); resnet: a small residual network with "
                       "BatchNorm (SyncBatchNorm across ranks when distributed); resnet18, "
                       "resnet50: torchvision's, with its state-dict names; gpt-nano (6 layers, "
                       "6 heads, 384 wide), gpt2 (124M), gpt2-medium (350M): nanoGPT's GPT, "
                       "with its state-dict names, on --dataset tokens",
                       &O::model, "model", kModels),
        config_flag(),
        choice_flag<O>(
            "--preset", "NAME",
            "reference (default): the reference program exactly; fast: a better recipe for "
            "the same model (--lr 0.05 --weight-decay 5e-4 --lr-schedule cosine "
            "--warmup-epochs 0.2 --normalize --hflip (not for mnist) --channels-last); flags "
            "given as well override it",
            &O::preset, "preset", kPresets),
        int_flag<O>("--epochs", "N", "epochs to train (default 10)", &O::epochs, 1, 100000),
        int_flag<O>("--batch-size", "N", "images per rank per step (default 64)", &O::batch_size, 1,
                    65536),
        choice_flag<O>("--optimizer", "NAME",
                       "sgd (default, with --momentum), adam, or adamw (for the GPTs, which "
                       "take adam or adamw: betas 0.9 and --beta2, --weight-decay on the "
                       "weights of two or more dimensions only, as nanoGPT)",
                       &O::optimizer, "optimizer", kOptimizers),
        switch_flag<O>("--no-pad",
                       "visit every training image exactly once per epoch: no padding of the "
                       "shards; ranks with one batch fewer join (shadow the others' "
                       "all-reduces) instead of hanging them",
                       &O::no_pad),
        switch_flag<O>("--local-batchnorm",
                       "batch norm takes each rank's own batch statistics, as PyTorch DDP does "
                       "for a model not converted to SyncBatchNorm (default: over all ranks)",
                       &O::local_batchnorm),
        switch_flag<O>("--zero",
                       "shard the optimizer state over the ranks (ZeRO stage 1): each keeps "
                       "~1/W of it, same weights",
                       &O::zero),
        real_flag<O>("--lr", "X", "learning rate (default 0.001)", &O::lr, 0, 1e3),
        choice_flag<O>("--lr-schedule", "NAME",
                       "constant (default) or cosine: the learning rate falls along a half "
                       "cosine to 0 at the last step",
                       &O::lr_schedule, "schedule", kSchedules),
        real_flag<O>("--warmup-epochs", "X",
                     "raise the learning rate linearly from 0 to --lr over the first X epochs "
                     "(default 0)",
                     &O::warmup_epochs, 0, 1e6),
        real_flag<O>("--momentum", "X", "SGD momentum (default 0.9)", &O::momentum, 0, 1),
        real_flag<O>("--weight-decay", "X",
                     "weight decay (default 0; AdamW's decoupled, on the weights only)",
                     &O::weight_decay, 0, 1),
        int_flag<O>("--seed", "N",
                    "seed of the model's initial weights, the shuffling and the augmentation "
                    "(default 0)",
                    &O::seed, 0, int64_t(1) << 62),
        int_flag<O>("--threads", "N",
                    c10::str("intra-op threads per worker (default 0: cores / workers on this "
                             "node, or ",
                             env::kOmpNumThreads, ")"),
                    &O::threads, 0, 1024),
        int_flag<O>("--max-steps", "N",
                    "stop each epoch after N steps (default 0: the whole epoch)", &O::max_steps, 0,
                    kHuge),
        text_flag<O>("--metrics", "FILE",
                     "append JSON-lines metrics (steps and epochs) to FILE (rank 0)", &O::metrics),
        text_flag<O>("--step-trace", "PREFIX",
                     "every rank writes its steps' times (batch ready, forward, own backward, "
                     "gradients averaged, optimizer; monotonic-clock seconds) to "
                     "PREFIX.RANK.csv, to find a straggling rank; tools/step_trace.py "
                     "summarises them",
                     &O::step_trace),
        text_flag<O>("--tensorboard", "DIR",
                     "write TensorBoard event files to DIR (rank 0): train/loss and train/lr "
                     "per logged step, epoch/train_loss, epoch/test_loss, epoch/test_accuracy "
                     "and epoch/images_per_second",
                     &O::tensorboard),
        text_flag<O>("--trace", "FILE",
                     "write a timeline of every rank (Chrome/Perfetto JSON: data wait, forward, "
                     "backward, each bucket's all-reduce, optimizer, evaluation, checkpoint) "
                     "to FILE at the end (rank 0); `ddp-train plot-trace FILE` draws it",
                     &O::trace),
        text_flag<O>("--debug-dir", "DIR",
                     "when a collective fails or times out, or a rank gets SIGTERM, every rank "
                     "writes its last collectives to DIR/flight-rank-N.json and the launcher "
                     "names the rank the others waited for; `ddp-train analyze DIR` says it "
                     "again (also " +
                         std::string(env::kDebugDir) + ")",
                     &O::debug_dir),
        switch_flag<O>("--debug-collectives",
                       "before each collective, check that every rank issues the same one "
                       "(operation, dtype, shape): a mismatch fails at once naming both, "
                       "instead of hanging (a store round trip per collective; also " +
                           std::string(env::kDebugCollectives) + "=1)",
                       &O::debug_collectives),
        int_flag<O>("--log-every", "N", "log the loss every N steps (default 50)", &O::log_every, 1,
                    kHuge),
        choice_flag<O>("--on-nan", "stop|skip",
                       "a non-finite loss or gradient: stop with the step and rank named "
                       "(default), or skip that step",
                       &O::on_nan, "action", kOnNan),
        switch_flag<O>("--no-eval", "skip the test-set evaluation after each epoch", &O::no_eval),
        device_flag(),
        choice_flag<O>("--precision", "fp32|bf16|fp16",
                       "the forward pass and evaluation: fp32 (default), or bf16 or fp16 under "
                       "autocast (convolutions and linear layers in 16 bits; weights, gradients "
                       "and the optimizer stay fp32); fp16 scales the loss (a GradScaler with "
                       "PyTorch's defaults: a step whose gradients overflow is skipped); fast "
                       "only on CPUs with AVX512-BF16 or AMX (bf16) or AVX512-FP16, and on GPUs",
                       &O::precision, "precision", kPrecisions),
        choice_flag<O>("--backend", "NAME",
                       "auto (default): nccl on a GPU (CUDA builds of LibTorch), gloo on the "
                       "CPU; gloo; nccl; mpi where LibTorch has it",
                       &O::backend, "backend", kBackends),
        init_method_flag(),
        real_flag<O>("--timeout", "SECONDS",
                     "limit for every collective; a silent peer fails the job after it "
                     "(default 300)",
                     &O::timeout, 0.1, 86400),
        real_flag<O>("--rendezvous-timeout", "SECONDS",
                     "limit for all ranks to meet at the start (default 120)",
                     &O::rendezvous_timeout, 0.1, 86400),
        real_flag<O>("--spin-wait-ms", "MS",
                     "how long a rank polls a collective for completion (yielding its core) "
                     "before it sleeps on it (default 20; 0: sleep at once, as PyTorch's "
                     "Gloo). On a VM, waking a sleeping thread can take longer than the "
                     "all-reduce",
                     &O::spin_wait_ms, 0, 10000),
        real_flag<O>("--bucket-cap-mb", "MB",
                     "gradient bucket size for the all-reduce (default 25)", &O::bucket_cap_mb,
                     0.001, 4096),
        real_flag<O>("--first-bucket-cap-mb", "MB",
                     "size of the first gradient bucket, reduced while backward goes on "
                     "(default 1)",
                     &O::first_bucket_cap_mb, 0.001, 4096),
        comm_hook_flag(),
        int_flag<O>("--nproc-per-node", "N",
                    "start N workers of ddp-train on this machine (like mp.spawn / torchrun; "
                    "default 0: this process is the worker)",
                    &O::nproc_per_node, 0, 1024),
        choice_flag<O>("--cpu-bind", "HOW", cli::kCpuBindHelp, &O::cpu_bind, "CPU binding",
                       cli::kCpuBindNames),
        switch_flag<O>("--dry-run",
                       "print the effective configuration and the plan (world, shards, steps "
                       "per epoch), then exit",
                       &O::dry_run),
        switch_flag<O>("--no-sync-baseline",
                       "benchmark only: ranks train without averaging gradients (DDP overhead "
                       "= step time with DDP / without)",
                       &O::no_sync_baseline),
        lockstep_flag(),
        text_flag<O>("--checkpoint-dir", "DIR",
                     "write checkpoints (model, optimizer, epoch, RNG) here, from rank 0",
                     &O::checkpoint_dir),
        int_flag<O>("--checkpoint-every", "N",
                    "write a checkpoint every N epochs (default 1; the last epoch always)",
                    &O::checkpoint_every, 1, 1000000),
        int_flag<O>("--checkpoint-every-steps", "N",
                    "also write a checkpoint every N steps, mid-epoch, without stopping "
                    "training: the state is copied into memory at the step's end and written "
                    "by a background thread; a resume from it at the same world size is "
                    "bit-exact (default 0: only at epoch ends)",
                    &O::checkpoint_every_steps, 0, kHuge),
        int_flag<O>("--keep", "K", "keep the K newest checkpoints (default 3)", &O::keep, 1,
                    1000000),
        text_flag<O>("--resume", "PATH|auto",
                     "continue from a checkpoint; auto: the newest in --checkpoint-dir, if any",
                     &O::resume),
        text_flag<O>("--export", "FILE",
                     "at the end, write the model's state dict for Python's torch.load (rank "
                     "0)",
                     &O::export_path),
        text_flag<O>("--init-from", "FILE",
                     "start from a state dict: an --export, a checkpoint, or Python's "
                     "torch.save(net.state_dict())",
                     &O::init_from),
        text_flag<O>("--checkpoint", "FILE",
                     "ddp-train evaluate: the checkpoint or state dict to evaluate",
                     &O::checkpoint),
    };
    for (auto& f : language_model_flags()) list.push_back(f);
    // With --nproc-per-node, the launcher's membership flags (ddprun's, torchrun's).
    for (auto& f : cli::elastic_flags<O>([](auto& o) -> auto& { return o.launcher; }))
      list.push_back(f);
    return cli::FlagTable<O>("ddp-train", std::move(list));
  }();
  return flags;
}

FlagArity flag_arity(const std::string& name) {
  const auto* flag = table().find(name);
  if (flag == nullptr) return FlagArity::kUnknown;
  return flag->value.empty() ? FlagArity::kSwitch : FlagArity::kValue;
}

TrainOptions parse_flags(const std::vector<std::string>& args, bool& help) {
  TrainOptions options;
  table().parse(args, options, help);
  return options;
}

}  // namespace

std::string to_string(Preset preset) { return cli::choice_name(preset, kPresets); }
std::string to_string(ModelKind model) { return cli::choice_name(model, kModels); }
std::string to_string(OptimizerKind optimizer) { return cli::choice_name(optimizer, kOptimizers); }
std::string to_string(BackendKind backend) { return cli::choice_name(backend, kBackends); }
std::string to_string(const DeviceChoice& device) {
  switch (device.kind) {
    case DeviceChoice::Kind::kAuto:
      return "auto";
    case DeviceChoice::Kind::kCpu:
      return "cpu";
    case DeviceChoice::Kind::kCuda:
      break;
  }
  return device.index < 0 ? "cuda" : c10::str("cuda:", device.index);
}

std::vector<std::string> preset_flags(Preset preset, data::DatasetKind dataset) {
  if (preset == Preset::kReference) return {};
  std::vector<std::string> f = {"--lr",          "0.05",           "--weight-decay",  "5e-4",
                                "--lr-schedule", "cosine",         "--warmup-epochs", "0.2",
                                "--normalize",   "--channels-last"};
  // A mirrored digit is another digit.
  if (dataset != data::DatasetKind::kMnist) f.push_back("--hflip");
  return f;
}

TrainOptions parse_train_options(const std::vector<std::string>& args, bool& help) {
  TrainOptions options = parse_flags(args, help);
  if (help) return options;
  // Later flags override earlier ones: the preset's, then the config file's, then the command
  // line's (a preset may be chosen in the file or on the command line).
  std::vector<std::string> given = args;
  if (!options.config.empty()) {
    given = flags_from_config_file(options.config, flag_arity);
    given.insert(given.end(), args.begin(), args.end());
    options = parse_flags(given, help);
  }
  if (options.preset != Preset::kReference) {
    std::vector<std::string> expanded = preset_flags(options.preset, options.dataset);
    expanded.insert(expanded.end(), given.begin(), given.end());
    options = parse_flags(expanded, help);
  }
  check_combinations(options);
  return options;
}

std::string config_text(const TrainOptions& o, bool only_changed) {
  // The file a configuration came from, as a comment: its keys are merged into the others.
  const std::string source =
      o.config.empty() ? "" : "# config = " + cli::FlagTable<O>::quoted(o.config) + "\n";
  return source + table().toml(o, only_changed);
}

std::vector<std::string> launcher_flag_names() {
  std::vector<std::string> names = {"--nproc-per-node", "--cpu-bind"};
  for (const auto& f : cli::elastic_flags<O>([](auto& o) -> auto& { return o.launcher; }))
    names.push_back(f.name);
  return names;
}

std::string train_help() {
  return "ddp-train: train an image classifier or a GPT with distributed data parallelism.\n\n"
         "usage: ddp-train [FLAGS]                 train (defaults: the reference program)\n"
         "       ddp-train evaluate --checkpoint FILE [--dataset ...]   test-set accuracy of a "
         "model\n"
         "       ddp-train make-data [FLAGS]       write a synthetic data set (see make-data "
         "--help)\n"
         "       ddp-train plot METRICS.jsonl -o curves.png|svg   loss and accuracy against "
         "epochs\n"
         "       ddp-train plot-trace TRACE.json -o timeline.png   the last steps of a --trace\n"
         "       ddp-train preview --dataset ... -o grid.png   the first batch as the model sees "
         "it\n"
         "       ddp-train analyze DIR             why a job run with --debug-dir DIR hung\n"
         "       ddp-train generate --init-from FILE   text sampled from a GPT's weights\n\n"
         "Rank and world size come from the environment (torchrun, ddprun, Slurm or Open MPI);\n"
         "without any, ddp-train is a single process. Every flag can also be a key of a --config\n"
         "file; --dry-run prints them all as such a file.\n\nflags:\n" +
         table().help();
}

}  // namespace ddp::train

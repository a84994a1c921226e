// ddp-train's configuration: every option typed (an enum for every closed choice), parsed once
// from one flag table (options.cpp) that also makes --help, --dry-run's configuration, the TOML
// that --config reads and the configuration saved in every checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddp/data/dataset.h"
#include "ddp/data/loader.h"
#include "ddp/elastic/cpu_binding.h"
#include "ddp/elastic/launch.h"
#include "ddp/precision.h"

namespace ddp::train {

enum class Preset { kReference, kFast };
enum class ModelKind { kNet, kResnet, kResnet18, kResnet50, kGptNano, kGpt2, kGpt2Medium };
enum class OptimizerKind { kSgd, kAdam, kAdamW };
enum class LrSchedule { kConstant, kCosine };  // cosine: per step, to 0 at the end
enum class OnNan { kStop, kSkip };             // a non-finite loss or gradient: stop, or skip it
enum class BackendKind { kAuto, kGloo, kNccl, kMpi };  // auto: nccl on a GPU, gloo on the CPU
enum class ParallelKind { kDdp, kFsdp };               // a whole replica per rank, or 1/N of it

/// --device: auto (cuda when a GPU is visible, else cpu), cpu, cuda (GPU LOCAL_RANK) or cuda:N.
struct DeviceChoice {
  enum class Kind { kAuto, kCpu, kCuda } kind = Kind::kAuto;
  int index = -1;  // cuda:N; -1: GPU LOCAL_RANK
};

/// Everything one training run is configured by; defaults are the reference program.
struct TrainOptions {
  // Data.
  data::DatasetKind dataset = data::DatasetKind::kCifar10;
  std::string data_dir;  // empty: the data set's default directory
  bool download = false;
  std::string download_url;  // empty: the official URL
  std::string download_md5;  // empty: the official checksum
  bool normalize = false;
  bool random_crop = false;
  bool horizontal_flip = false;
  bool channels_last = false;
  int image_size = 224;      // imagefolder: the side of the images the model takes
  bool full_decode = false;  // imagefolder training: no JPEG decoding at 1/2, 1/4, 1/8
  int loader_threads = 0;    // 0: a default that leaves the compute its CPUs
  data::OnBadSample on_bad_sample = data::OnBadSample::kStop;
  // Model and optimiser.
  std::string config;  // --config: a TOML file of flags (the command line overrides)
  Preset preset = Preset::kReference;  // defaults that the flags then override
  ModelKind model = ModelKind::kNet;
  int epochs = 10;
  int64_t batch_size = 64;
  OptimizerKind optimizer = OptimizerKind::kSgd;
  double lr = 0.001;
  double momentum = 0.9;
  double weight_decay = 0.0;
  LrSchedule lr_schedule = LrSchedule::kConstant;
  double warmup_epochs = 0;  // linear warm-up from 0 before the schedule
  uint64_t seed = 0;
  // Language models (--model gpt-*, --dataset tokens): nanoGPT's train.py.
  ParallelKind parallel = ParallelKind::kDdp;
  int64_t steps = 5000;       // optimizer steps of the run
  int64_t grad_accum = 1;     // micro-batches per optimizer step
  int64_t block_size = 0;     // 0: the model's context
  double grad_clip = 1.0;     // the global gradient norm's limit (0: none)
  double min_lr = 0;          // where the cosine schedule ends
  int64_t warmup_steps = 0;   // linear warm-up from lr/(N+1)
  double beta2 = 0.95;        // AdamW's second-moment decay
  int64_t eval_every = 250;   // steps between validation losses (0: only at the end)
  int64_t eval_batches = 20;  // batches per rank of each validation loss
  // Run.
  int threads = 0;                 // 0: cores / local workers, or OMP_NUM_THREADS
  int64_t max_steps = 0;           // per epoch; 0: the whole epoch
  std::string metrics;             // JSON lines file, written by rank 0
  std::string step_trace;          // prefix of the per-rank step-time CSV files (every rank)
  std::string tensorboard;         // directory for TensorBoard event files, written by rank 0
  std::string trace;               // Chrome/Perfetto trace of every rank's steps, written by rank 0
  std::string debug_dir;           // flight records on a failure, a timeout or SIGTERM (every rank)
  bool debug_collectives = false;  // every rank checks it issues the same collectives
  int64_t log_every = 50;
  bool no_eval = false;
  OnNan on_nan = OnNan::kStop;
  // Device and distributed.
  DeviceChoice device;
  Precision precision = Precision::kFp32;  // the forward pass: fp32, or bf16 under autocast
  BackendKind backend = BackendKind::kAuto;
  std::string init_method = "env://";
  double timeout = 300;             // seconds, for every collective
  double rendezvous_timeout = 120;  // seconds, for all ranks to meet
  double spin_wait_ms = 20;         // how long a collective's wait polls before it sleeps
  double bucket_cap_mb = 25;
  double first_bucket_cap_mb = 1;
  bool no_pad = false;                  // sampler without padding; ranks join when out of data
  bool local_batchnorm = false;         // batch norm statistics per rank (no SyncBatchNorm)
  bool zero = false;                    // shard the optimizer state over the ranks (ZeRO stage 1)
  std::string comm_hook = "allreduce";  // allreduce, fp16, bf16 or powersgd[:rank[:start]]
  int nproc_per_node = 0;               // > 0: start this many workers of ddp-train
  CpuBind cpu_bind = CpuBind::kNone;    // the launcher's placement of its workers on the CPUs
  LaunchOptions launcher;          // with --nproc-per-node: --nnodes, --rdzv-*, --max-restarts, ...
  bool dry_run = false;            // print the configuration and the plan, train nothing
  bool no_sync_baseline = false;   // benchmark: ranks train without the gradient all-reduce
  bool lockstep_baseline = false;  // benchmark: ... but wait for each other every step
  // Checkpoints and interop.
  std::string checkpoint_dir;
  int checkpoint_every = 1;            // epochs
  int64_t checkpoint_every_steps = 0;  // > 0: also every N steps, written in the background
  int keep = 3;
  std::string resume;       // PATH or "auto"
  std::string export_path;  // state dict for Python, written at the end
  std::string init_from;    // state dict (ours or Python's) to start from
  std::string checkpoint;   // evaluate: the file to evaluate
};

/// The names the flags use for each choice.
std::string to_string(Preset preset);
std::string to_string(ModelKind model);
std::string to_string(OptimizerKind optimizer);
std::string to_string(BackendKind backend);
std::string to_string(ParallelKind parallel);
/// Whether `model` is a GPT (trained on tokens by lm/lm_training.h).
bool is_language_model(ModelKind model);
std::string to_string(const DeviceChoice& device);

/// The effective configuration as TOML, one "key = value" line per flag (all of them): printed
/// by --dry-run, saved in checkpoints, and read back by --config to the same options. With
/// `only_changed`, only the flags whose value is not the default.
std::string config_text(const TrainOptions& options, bool only_changed = false);

/// Parses argv (after the program name); throws InvalidArgument naming the flag on any mistake.
/// Sets `help` instead of throwing when --help is given.
TrainOptions parse_train_options(const std::vector<std::string>& args, bool& help);

/// The flags a preset stands for (kReference: none), for a run on `dataset`.
std::vector<std::string> preset_flags(Preset preset, data::DatasetKind dataset);

/// The flags --on-failure continue cannot keep (their state is tied to one group of ranks),
/// named in an InvalidArgument; nothing when they are all fine.
void check_fault_tolerance_options(const TrainOptions& options);

/// The flags that are the embedded launcher's (--nproc-per-node, --cpu-bind and the membership
/// flags): the launcher keeps them, its workers get the others.
std::vector<std::string> launcher_flag_names();

/// The --help text of the train command.
std::string train_help();

}  // namespace ddp::train

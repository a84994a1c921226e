#include "options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <sstream>

#include "config_file.h"
#include "ddp/comm_hook.h"
#include "ddp/data/dataset.h"
#include "ddp/error.h"
#include "ddp/precision.h"

namespace ddp::train {
namespace {

struct Flag {
  std::string name;
  std::string value;  // empty: a switch that takes no value
  std::string help;
  std::function<void(TrainOptions&, const std::string&)> set;
};

// `value` when it is one of `choices`; otherwise "FLAG: unknown WHAT 'value'; use a, b or c".
std::string one_of(const std::string& flag, const std::string& what, const std::string& value,
                   const std::vector<std::string>& choices) {
  for (const auto& c : choices) {
    if (c == value) return value;
  }
  std::string list;
  for (size_t i = 0; i < choices.size(); ++i) {
    list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  }
  throw InvalidArgument(concat(flag, ": unknown ", what, " '", value, "'; use ", list));
}

double parse_double(const std::string& flag, const std::string& text, double min, double max) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || v < min || v > max) {
    throw InvalidArgument(concat(flag, ": '", text, "' is not a number in [", min, ", ", max, "]"));
  }
  return v;
}

int64_t parse_int64(const std::string& flag, const std::string& text, int64_t min, int64_t max) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < min || v > max) {
    throw InvalidArgument(
        concat(flag, ": '", text, "' is not an integer in [", min, ", ", max, "]"));
  }
  return v;
}

const std::vector<Flag>& flags() {
  using O = TrainOptions;
  static const std::vector<Flag> table = {
      {"--dataset", "NAME", "cifar10 (default), fashion-mnist or mnist",
       [](O& o, const std::string& v) {
         o.dataset = data::dataset_kind_name(data::parse_dataset_kind(v));
       }},
      {"--data-dir", "DIR",
       "where the data set is (default: data for CIFAR-10 — the directory cifar-10-batches-bin or "
       "its parent; /usr/share/datasets/fashion-mnist for Fashion-MNIST; data/mnist for MNIST)",
       [](O& o, const std::string& v) { o.data_dir = v; }},
      {"--download", "", "fetch CIFAR-10 into --data-dir first if it is not there (MD5-checked)",
       [](O& o, const std::string&) { o.download = true; }},
      {"--download-url", "URL", "where --download fetches cifar-10-binary.tar.gz from (a mirror)",
       [](O& o, const std::string& v) { o.download_url = v; }},
      {"--download-md5", "HEX", "the MD5 the downloaded archive must have (with --download-url)",
       [](O& o, const std::string& v) { o.download_md5 = v; }},
      {"--normalize", "", "normalise each channel by the data set's mean and std",
       [](O& o, const std::string&) { o.normalize = true; }},
      {"--random-crop", "", "random crop with zero padding 4 (seeded, per batch)",
       [](O& o, const std::string&) { o.random_crop = true; }},
      {"--hflip", "", "random horizontal flip (seeded, per batch)",
       [](O& o, const std::string&) { o.horizontal_flip = true; }},
      {"--channels-last", "", "keep images and conv weights in NHWC memory (faster with oneDNN)",
       [](O& o, const std::string&) { o.channels_last = true; }},
      {"--model", "NAME",
       "net: the reference CNN (default); resnet: a small residual network with BatchNorm "
       "(SyncBatchNorm across ranks when distributed)",
       [](O& o, const std::string& v) {
         o.model = one_of("--model", "model", v, {"net", "resnet"});
       }},
      {"--config", "FILE",
       "read flags from a TOML file: each key a flag without the dashes (lr = 0.05, "
       "batch_size = 128, no-pad = true); flags on the command line override it",
       [](O& o, const std::string& v) { o.config = v; }},
      {"--preset", "NAME",
       "reference (default): the reference program exactly; fast: a better recipe for the same "
       "model (--lr 0.05 --weight-decay 5e-4 --lr-schedule cosine --warmup-epochs 0.2 --normalize "
       "--hflip (not for mnist) --channels-last); flags given as well override it",
       [](O& o, const std::string& v) {
         preset_flags(v, o.dataset);  // validates the name
         o.preset = v;
       }},
      {"--epochs", "N", "epochs to train (default 10)",
       [](O& o, const std::string& v) { o.epochs = int(parse_int64("--epochs", v, 1, 100000)); }},
      {"--batch-size", "N", "images per rank per step (default 64)",
       [](O& o, const std::string& v) { o.batch_size = parse_int64("--batch-size", v, 1, 65536); }},
      {"--optimizer", "NAME", "sgd (default, with --momentum) or adam",
       [](O& o, const std::string& v) {
         o.optimizer = one_of("--optimizer", "optimizer", v, {"sgd", "adam"});
       }},
      {"--no-pad", "",
       "visit every training image exactly once per epoch: no padding of the shards; ranks with "
       "one batch fewer join (shadow the others' all-reduces) instead of hanging them",
       [](O& o, const std::string&) { o.no_pad = true; }},
      {"--zero", "",
       "shard the optimizer state over the ranks (ZeRO stage 1): each keeps ~1/W of it, same "
       "weights",
       [](O& o, const std::string&) { o.zero = true; }},
      {"--lr", "X", "learning rate (default 0.001)",
       [](O& o, const std::string& v) { o.lr = parse_double("--lr", v, 0, 1e3); }},
      {"--lr-schedule", "NAME",
       "constant (default) or cosine: the learning rate falls along a half cosine to 0 at the "
       "last step",
       [](O& o, const std::string& v) {
         if (v != "constant" && v != "cosine") {
           throw InvalidArgument(concat("--lr-schedule: '", v, "' is not constant or cosine"));
         }
         o.lr_schedule = v;
       }},
      {"--warmup-epochs", "X",
       "raise the learning rate linearly from 0 to --lr over the first X epochs (default 0)",
       [](O& o, const std::string& v) {
         o.warmup_epochs = parse_double("--warmup-epochs", v, 0, 1e6);
       }},
      {"--momentum", "X", "SGD momentum (default 0.9)",
       [](O& o, const std::string& v) { o.momentum = parse_double("--momentum", v, 0, 1); }},
      {"--weight-decay", "X", "SGD weight decay (default 0)",
       [](O& o, const std::string& v) {
         o.weight_decay = parse_double("--weight-decay", v, 0, 1);
       }},
      {"--seed", "N",
       "seed of the model's initial weights, the shuffling and the augmentation (default 0)",
       [](O& o, const std::string& v) {
         o.seed = uint64_t(parse_int64("--seed", v, 0, int64_t(1) << 62));
       }},
      {"--threads", "N",
       "intra-op threads per worker (default: cores / workers on this node, or OMP_NUM_THREADS)",
       [](O& o, const std::string& v) { o.threads = int(parse_int64("--threads", v, 1, 1024)); }},
      {"--max-steps", "N", "stop each epoch after N steps (default: the whole epoch)",
       [](O& o, const std::string& v) {
         o.max_steps = parse_int64("--max-steps", v, 1, int64_t(1) << 40);
       }},
      {"--metrics", "FILE", "append JSON-lines metrics (steps and epochs) to FILE (rank 0)",
       [](O& o, const std::string& v) { o.metrics = v; }},
      {"--step-trace", "PREFIX",
       "every rank writes its steps' times (batch ready, forward, own backward, gradients "
       "averaged, optimizer; monotonic-clock seconds) to PREFIX.RANK.csv, to find a straggling "
       "rank; bench/step_trace.py summarises them",
       [](O& o, const std::string& v) { o.step_trace = v; }},
      {"--tensorboard", "DIR",
       "write TensorBoard event files to DIR (rank 0): train/loss and train/lr per logged step, "
       "epoch/train_loss, epoch/test_loss, epoch/test_accuracy and epoch/images_per_second",
       [](O& o, const std::string& v) { o.tensorboard = v; }},
      {"--log-every", "N", "log the loss every N steps (default 50)",
       [](O& o, const std::string& v) {
         o.log_every = parse_int64("--log-every", v, 1, int64_t(1) << 40);
       }},
      {"--on-nan", "stop|skip",
       "a non-finite loss or gradient: stop with the step and rank named (default), or skip that "
       "step",
       [](O& o, const std::string& v) {
         if (v != "stop" && v != "skip")
           throw InvalidArgument(concat("--on-nan: '", v, "' is not stop or skip"));
         o.on_nan = v;
       }},
      {"--no-eval", "", "skip the test-set evaluation after each epoch",
       [](O& o, const std::string&) { o.evaluate = false; }},
      {"--device", "NAME",
       "auto (default): cuda when LibTorch has CUDA and a GPU is visible, else cpu; cpu; cuda "
       "(each worker on GPU LOCAL_RANK of its node); cuda:N (every worker on GPU N: workers "
       "sharing a GPU need --backend gloo, NCCL refuses them)",
       [](O& o, const std::string& v) {
         const bool gpu_index = v.size() > 5 && v.size() <= 9 && v.rfind("cuda:", 0) == 0 &&
                                v.find_first_not_of("0123456789", 5) == std::string::npos;
         if (!gpu_index && v.rfind("cuda:", 0) == 0) {
           throw InvalidArgument(concat("--device: '", v, "' is not cuda:N (N a GPU's index)"));
         }
         o.device = gpu_index ? v : one_of("--device", "device", v, {"auto", "cpu", "cuda"});
       }},
      {"--precision", "fp32|bf16",
       "the forward pass and evaluation: fp32 (default), or bf16 under autocast (convolutions "
       "and linear layers in bfloat16; weights, gradients and the optimizer stay fp32); fast "
       "only on CPUs with AVX512-BF16 or AMX, and on GPUs",
       [](O& o, const std::string& v) {
         o.precision = to_string(parse_precision(v, "--precision"));
       }},
      {"--backend", "NAME",
       "gloo (the default on the CPU) or nccl (the default on a GPU; CUDA builds of LibTorch); mpi "
       "where LibTorch has it",
       [](O& o, const std::string& v) {
         o.backend = one_of("--backend", "backend", v, {"gloo", "nccl", "mpi"});
       }},
      {"--init-method", "URL", "env:// (default), tcp://HOST:PORT or file:///PATH",
       [](O& o, const std::string& v) {
         if (v != "env://" && v.rfind("tcp://", 0) != 0 && v.rfind("file://", 0) != 0) {
           throw InvalidArgument(
               concat("--init-method: '", v, "' is not env://, tcp://HOST:PORT or file:///PATH"));
         }
         o.init_method = v;
       }},
      {"--timeout", "SECONDS",
       "limit for every collective; a silent peer fails the job after it (default 300)",
       [](O& o, const std::string& v) { o.timeout = parse_double("--timeout", v, 0.1, 86400); }},
      {"--rendezvous-timeout", "SECONDS", "limit for all ranks to meet at the start (default 120)",
       [](O& o, const std::string& v) {
         o.rendezvous_timeout = parse_double("--rendezvous-timeout", v, 0.1, 86400);
       }},
      {"--spin-wait-ms", "MS",
       "how long a rank polls a collective for completion (yielding its core) before it sleeps "
       "on it (default 20; 0: sleep at once, as PyTorch's Gloo). On a VM, waking a sleeping "
       "thread can take longer than the all-reduce",
       [](O& o, const std::string& v) {
         o.spin_wait_ms = parse_double("--spin-wait-ms", v, 0, 10000);
       }},
      {"--bucket-cap-mb", "MB", "gradient bucket size for the all-reduce (default 25)",
       [](O& o, const std::string& v) {
         o.bucket_cap_mb = parse_double("--bucket-cap-mb", v, 0.001, 4096);
       }},
      {"--first-bucket-cap-mb", "MB",
       "size of the first gradient bucket, reduced while backward goes on (default 1)",
       [](O& o, const std::string& v) {
         o.first_bucket_cap_mb = parse_double("--first-bucket-cap-mb", v, 0.001, 4096);
       }},
      {"--comm-hook", "NAME",
       "how gradients are averaged: allreduce (default), fp16 or bf16 (16-bit on the wire), "
       "powersgd[:RANK[:START]] (rank-RANK low-rank compression with error feedback after START "
       "plain steps; defaults 1 and 100)",
       [](O& o, const std::string& v) {
         make_comm_hook(v);  // validates
         o.comm_hook = v;
       }},
      {"--nproc-per-node", "N",
       "start N workers of ddp-train on this machine (like mp.spawn / torchrun)",
       [](O& o, const std::string& v) {
         o.nproc_per_node = int(parse_int64("--nproc-per-node", v, 1, 1024));
       }},
      {"--dry-run", "",
       "print the effective configuration and the plan (world, shards, steps per epoch), then exit",
       [](O& o, const std::string&) { o.dry_run = true; }},
      {"--no-sync-baseline", "",
       "benchmark only: ranks train without averaging gradients (DDP overhead = step time with DDP "
       "/ without)",
       [](O& o, const std::string&) { o.no_sync_baseline = true; }},
      {"--lockstep-baseline", "",
       "benchmark only: like --no-sync-baseline, but the ranks wait for each other after every "
       "backward (an all-reduce of one float, no gradients): what keeping ranks in step costs by "
       "itself",
       [](O& o, const std::string&) { o.no_sync_baseline = o.lockstep_baseline = true; }},
      {"--checkpoint-dir", "DIR",
       "write checkpoints (model, optimizer, epoch, RNG) here, from rank 0",
       [](O& o, const std::string& v) { o.checkpoint_dir = v; }},
      {"--checkpoint-every", "N",
       "write a checkpoint every N epochs (default 1; the last epoch always)",
       [](O& o, const std::string& v) {
         o.checkpoint_every = int(parse_int64("--checkpoint-every", v, 1, 1000000));
       }},
      {"--keep", "K", "keep the K newest checkpoints (default 3)",
       [](O& o, const std::string& v) { o.keep = int(parse_int64("--keep", v, 1, 1000000)); }},
      {"--resume", "PATH|auto",
       "continue from a checkpoint; auto: the newest in --checkpoint-dir, if any",
       [](O& o, const std::string& v) { o.resume = v; }},
      {"--export", "FILE",
       "at the end, write the model's state dict for Python's torch.load (rank 0)",
       [](O& o, const std::string& v) { o.export_path = v; }},
      {"--init-from", "FILE",
       "start from a state dict: an --export, a checkpoint, or Python's "
       "torch.save(net.state_dict())",
       [](O& o, const std::string& v) { o.init_from = v; }},
      {"--checkpoint", "FILE", "ddp-train evaluate: the checkpoint or state dict to evaluate",
       [](O& o, const std::string& v) { o.checkpoint = v; }},
  };
  return table;
}

}  // namespace

std::vector<std::string> preset_flags(const std::string& preset, const std::string& dataset) {
  if (preset == "reference") return {};
  if (preset == "fast") {
    std::vector<std::string> f = {"--lr",          "0.05",           "--weight-decay",  "5e-4",
                                  "--lr-schedule", "cosine",         "--warmup-epochs", "0.2",
                                  "--normalize",   "--channels-last"};
    if (dataset != "mnist") f.push_back("--hflip");  // a mirrored digit is another digit
    return f;
  }
  throw InvalidArgument(concat("--preset: unknown preset '", preset, "'; use reference or fast"));
}

namespace {

FlagArity flag_arity(const std::string& name) {
  for (const Flag& f : flags()) {
    if (f.name == name) return f.value.empty() ? FlagArity::kSwitch : FlagArity::kValue;
  }
  return FlagArity::kUnknown;
}

TrainOptions parse_flags(const std::vector<std::string>& args, bool& help) {
  TrainOptions options;
  help = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    bool has_value = false;
    if (name == "--help" || name == "-h") {
      help = true;
      return options;
    }
    const size_t eq = name.find('=');
    if (name.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const Flag* flag = nullptr;
    for (const Flag& f : flags()) {
      if (f.name == name) flag = &f;
    }
    if (flag == nullptr) {
      throw InvalidArgument(concat("unknown argument '", args[i], "'; see ddp-train --help"));
    }
    if (flag->value.empty()) {
      if (has_value) throw InvalidArgument(concat(name, " takes no value"));
    } else if (!has_value) {
      if (i + 1 >= args.size()) {
        throw InvalidArgument(concat(name, " needs a value (", flag->value, ")"));
      }
      value = args[++i];
    }
    flag->set(options, value);
  }
  return options;
}

}  // namespace

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
  if (options.preset != "reference") {
    std::vector<std::string> expanded = preset_flags(options.preset, options.dataset);
    expanded.insert(expanded.end(), given.begin(), given.end());
    options = parse_flags(expanded, help);
  }
  if (options.resume == "auto" && options.checkpoint_dir.empty()) {
    throw InvalidArgument("--resume auto needs --checkpoint-dir (where to look for checkpoints)");
  }
  if (!options.resume.empty() && !options.init_from.empty()) {
    throw InvalidArgument(
        "--resume and --init-from exclude each other: a checkpoint already holds the weights");
  }
  if (!options.download_md5.empty() && options.download_url.empty()) {
    throw InvalidArgument("--download-md5 only applies together with --download-url");
  }
  return options;
}

std::string config_text(const TrainOptions& o) {
  std::ostringstream out;
  if (!o.config.empty()) out << "config = " << o.config << "\n";
  out << "preset = " << o.preset << "\ndataset = " << o.dataset << "\ndata_dir = " << o.data_dir
      << "\nmodel = " << o.model << "\nepochs = " << o.epochs << "\nbatch_size = " << o.batch_size
      << "\nlr = " << o.lr << "\nlr_schedule = " << o.lr_schedule
      << "\nwarmup_epochs = " << o.warmup_epochs << "\nmomentum = " << o.momentum
      << "\nweight_decay = " << o.weight_decay << "\nseed = " << o.seed
      << "\nnormalize = " << o.normalize << "\nrandom_crop = " << o.random_crop
      << "\nhorizontal_flip = " << o.horizontal_flip << "\nchannels_last = " << o.channels_last
      << "\nmax_steps = " << o.max_steps << "\ndevice = " << o.device
      << "\nprecision = " << o.precision
      << "\nbackend = " << (o.backend.empty() ? "auto" : o.backend)
      << "\nbucket_cap_mb = " << o.bucket_cap_mb << "\ncomm_hook = " << o.comm_hook
      << "\nspin_wait_ms = " << o.spin_wait_ms << "\noptimizer = " << o.optimizer
      << "\nzero = " << o.zero << "\nno_pad = " << o.no_pad << "\n";
  return out.str();
}

std::string train_help() {
  std::ostringstream out;
  out << "ddp-train: train an image classifier with distributed data parallelism.\n\n"
         "usage: ddp-train [FLAGS]                 train (defaults: the reference program)\n"
         "       ddp-train evaluate --checkpoint FILE [--dataset ...]   test-set accuracy of a "
         "model\n"
         "       ddp-train make-data [FLAGS]       write a synthetic data set (see make-data "
         "--help)\n"
         "       ddp-train plot METRICS.jsonl -o curves.png|svg   loss and accuracy against "
         "epochs\n\n"
         "Rank and world size come from the environment (torchrun, ddprun, Slurm or Open MPI);\n"
         "without any, ddp-train is a single process.\n\nflags:\n";
  for (const Flag& f : flags()) {
    std::string left = "  " + f.name + (f.value.empty() ? "" : " " + f.value);
    if (left.size() < 28)
      left.resize(28, ' ');
    else
      left += "\n" + std::string(28, ' ');
    out << left << f.help << "\n";
  }
  out << "  --help                    show this text\n";
  return out.str();
}

}  // namespace ddp::train

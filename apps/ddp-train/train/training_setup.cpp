#include "train/training_setup.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include <c10/util/StringUtil.h>

#include "ddp/allocator.h"
#include "ddp/data/download.h"
#include "ddp/elastic/cpu_binding.h"
#include "ddp/elastic/job_progress.h"
#include "ddp/environment.h"
#include "ddp/error.h"
#include "ddp/sync_batchnorm.h"
#include "flag_hint.h"
#include "flags.h"

namespace ddp::train {

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(int64_t(seconds * 1000));
}

namespace {

// The device this rank trains on. auto: this node's GPU LOCAL_RANK when LibTorch has CUDA and
// a GPU is visible, else the CPU; cuda:N: GPU N whatever the rank.
torch::Device training_device(const DeviceChoice& choice, const WorldInfo& world) {
  using Kind = DeviceChoice::Kind;
  if (choice.kind == Kind::kCpu || (choice.kind == Kind::kAuto && !torch::cuda::is_available())) {
    return torch::kCPU;
  }
  if (!torch::cuda::is_available()) {
    throw InvalidArgument(
        c10::str("--device ", to_string(choice),
                 ": no GPU is usable (this LibTorch has no CUDA, as Debian's 1.13, or no GPU is "
                 "visible: check nvidia-smi and ",
                 env::kCudaVisibleDevices, "); use --device cpu"));
  }
  const int gpus = int(torch::cuda::device_count());
  if (choice.index >= 0) {
    if (choice.index >= gpus) {
      throw InvalidArgument(c10::str("--device ", to_string(choice), ": this node has ", gpus,
                                     " GPU(s) visible, cuda:0 to cuda:", gpus - 1));
    }
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(choice.index));
  }
  if (world.local_rank >= gpus) {
    throw InvalidArgument(c10::str("--device cuda: local rank ", world.local_rank,
                                   " needs GPU cuda:", world.local_rank, ", but this node has ",
                                   gpus, " visible; start at most ", gpus, " workers per node"));
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(world.local_rank));
}

// --backend, or the default for the device: NCCL for GPUs (where LibTorch has it), else Gloo.
std::string backend_for(BackendKind backend, torch::Device device) {
  if (backend != BackendKind::kAuto) return to_string(backend);
  return device.is_cuda() && ProcessGroup::has_backend("nccl") ? "nccl" : "gloo";
}

ProcessGroupOptions group_options(const TrainOptions& o, const TrainingSetup& s) {
  ProcessGroupOptions pg;
  pg.backend(s.backend);
  // NCCL exchanges tensors on this rank's GPU; Gloo takes CPU (and, in CUDA builds, GPU) ones.
  if (s.backend == "nccl") pg.device(s.device);
  pg.init_method(o.init_method);
  pg.timeout(to_ms(o.timeout));
  pg.rendezvous_timeout(to_ms(o.rendezvous_timeout));
  pg.spin_before_sleep(std::chrono::microseconds(int64_t(o.spin_wait_ms * 1000)));
  pg.debug_dir(o.debug_dir);
  pg.debug_collectives(o.debug_collectives);
  // A restart's flight records say which it is, and an elastic round's why it began
  // (docs/fault-tolerance.md).
  if (const std::optional<std::string> cause = JobProgress::round_cause(s.world)) {
    pg.description(c10::str("round ", s.world.restart_count + 1, " (world size ",
                            s.world.world_size, cause->empty() ? "" : "; because ", *cause, ")"));
  } else if (s.world.restart_count > 0) {
    pg.description(c10::str("restart ", s.world.restart_count));
  }
  return pg;
}

std::shared_ptr<ProcessGroup> open_group(const TrainOptions& o, const TrainingSetup& s) {
  const ProcessGroupOptions pg = group_options(o, s);
  return with_flag_hint("--backend, --init-method, --device",
                        [&] { return ProcessGroup::init(pg, s.world); });
}

// --on-failure continue: the first generation (a newcomer waits to be admitted to the running
// one; without a group when the job finished first); the set-up's rank and world size are its.
void open_fault_tolerant_group(const TrainOptions& o, TrainingSetup& s) {
  check_fault_tolerance_options(o);
  const FaultToleranceOptions options = FaultToleranceOptions().group(group_options(o, s));
  if (s.newcomer) std::printf("ddp-train: a newcomer, waiting to be admitted to the job\n");
  s.ft = FaultTolerantGroup::from_environment(options, s.world);
  if (!s.ft) return;
  s.group = s.ft->group();
  s.world.rank = s.ft->membership().rank;
  s.world.world_size = s.ft->membership().size();
}

// Rank 0 downloads while the others wait, then everyone opens the same files.
void open_data(const TrainOptions& o, TrainingSetup& s) {
  const std::string dir = data_dir_of(o);
  if (o.download) {
    if (o.dataset != data::DatasetKind::kCifar10) {
      throw InvalidArgument("--download is only available for --dataset cifar10");
    }
    if (s.is_root()) {
      data::DownloadOptions d;
      if (!o.download_url.empty()) d.url(o.download_url);
      if (!o.download_md5.empty()) d.md5(o.download_md5);
      with_flag_hint("--data-dir, --download-url", [&] { data::download_cifar10(dir, d); });
    }
    if (s.group) s.group->barrier();
  }
  s.data = open_training_data(o, dir);
  if (s.is_root()) {
    std::printf("data: %s; %s\n", s.data.train_description.c_str(),
                s.data.test_description.c_str());
  }
}

// Batch statistics over all ranks' batches, as one process on the whole batch would have.
void synchronise_batch_norm(const TrainOptions& o, TrainingSetup& s) {
  const int synced = convert_sync_batchnorm(*s.model, s.group);
  if (synced > 0 && s.ft) {
    throw InvalidArgument(
        c10::str("--on-failure continue cannot keep the SyncBatchNorm layers of --model ",
                 to_string(o.model), " (they hold one group of ranks): add --local-batchnorm"));
  }
  if (synced > 0 && o.no_pad) {
    throw InvalidArgument(c10::str(
        "--no-pad cannot be used with --model ", to_string(o.model), " on ", s.world.world_size,
        " ranks: its SyncBatchNorm layers need every rank's batch in every forward, "
        "which a rank out of data cannot shadow; leave out --no-pad (the shards are "
        "padded to equal length, as PyTorch's DistributedSampler does)"));
  }
  if (synced > 0 && s.is_root()) {
    std::printf("model: %d SyncBatchNorm layer(s) take their statistics over all %d ranks\n",
                synced, s.world.world_size);
  }
}

// The model, seeded before it is built, as the reference program does; on the device before DDP,
// which broadcasts rank 0's weights there.
void build_model(const TrainOptions& o, TrainingSetup& s) {
  const data::ImageShape shape = s.data.input;
  torch::manual_seed(o.seed);
  s.model = with_flag_hint("--model, --dataset, --image-size", [&] {
    return models::make_classifier(to_string(o.model), shape.channels, shape.height,
                                   s.data.num_classes);
  });
  if (s.group && !o.local_batchnorm) synchronise_batch_norm(o, s);
  if (o.channels_last) {
    // nn::Module::to() has no memory-format overload in the C++ API: convert the 4-d weights.
    torch::NoGradGuard no_grad;
    for (auto& p : s.model->parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
    }
  }
  s.model->to(s.device);
  // What computes the layers in fp32; under bf16 autocast LibTorch's kernels do.
  const std::string kernels = s.model->kernels();
  if (s.is_root() && s.device.is_cpu() && !kernels.empty() && o.precision == Precision::kFp32) {
    std::printf("layers: %s\n", kernels.c_str());
  }
}

}  // namespace

int choose_threads(const TrainOptions& options, const WorldInfo& world, std::string& reason) {
  if (options.threads > 0) {
    reason = "--threads";
    return options.threads;
  }
  if (const char* omp = std::getenv(env::kOmpNumThreads); omp != nullptr && *omp != '\0') {
    reason = env::kOmpNumThreads;
    return int(
        cli::parse_int64(c10::str("environment variable ", env::kOmpNumThreads), omp, 1, 1024));
  }
  // The CPUs this process may use (taskset, a batch system or the launcher's --cpu-bind).
  const int cpus = int(std::max<size_t>(1, allowed_cpus().size()));
  if (launched_with_cpu_binding()) {
    reason = c10::str("its ", cpus, " CPU(s), --cpu-bind cores");  // this rank's share alone
    return cpus;
  }
  reason = c10::str(cpus, " cores / ", world.local_world_size, " local workers");
  return std::max(1, cpus / std::max(1, world.local_world_size));
}

namespace {

// Where a data set's files are looked for without --data-dir: ./data for CIFAR-10, data/mnist
// for MNIST, and where Debian's dataset-fashion-mnist installs Fashion-MNIST (an image folder has
// no default: options.cpp asks for --data-dir).
std::string default_data_dir(data::DatasetKind kind) {
  switch (kind) {
    case data::DatasetKind::kFashionMnist:
      return "/usr/share/datasets/fashion-mnist";
    case data::DatasetKind::kMnist:
      return "data/mnist";
    case data::DatasetKind::kCifar10:
    case data::DatasetKind::kImageFolder:
    case data::DatasetKind::kTokens:
      break;
  }
  return "data";
}

}  // namespace

std::string data_dir_of(const TrainOptions& o) {
  return o.data_dir.empty() ? default_data_dir(o.dataset) : o.data_dir;
}

TrainingSetup set_up_process(const TrainOptions& o, const WorldInfo& world) {
  // Before any large tensor: each step's activations then reuse the last step's memory.
  const AllocatorPolicy allocator = retain_freed_memory();
  const TensorCachePolicy tensor_cache = cache_cpu_tensors(world.local_world_size);
  std::string thread_reason;
  const int threads = choose_threads(o, world, thread_reason);
  at::set_num_threads(threads);
  TrainingSetup s;
  s.world = world;
  s.device = training_device(o.device, world);
  s.precision = o.precision;
  // Gloo under --on-failure continue, whose ranks must be able to leave a collective.
  s.newcomer = FaultTolerantGroup::is_newcomer(world);
  const bool fault_tolerant = FaultTolerantGroup::requested(world);
  s.backend = fault_tolerant ? "gloo" : backend_for(o.backend, s.device);
  if (s.newcomer) {
    s.world.rank = -1;  // nobody's rank 0 until admitted, once ready to train (below)
  } else if (fault_tolerant) {
    open_fault_tolerant_group(o, s);
  } else if (world.world_size > 1) {
    s.group = open_group(o, s);
  }
  if (s.is_root()) {
    const bool one_gpu = o.device.index >= 0;
    const std::string device = one_gpu              ? to_string(o.device)
                               : s.device.is_cuda() ? c10::str("cuda:", env::kLocalRank)
                                                    : "cpu";
    std::printf(
        "ddp-train: world size %d (%s), device %s, backend %s, %d intra-op thread(s) per worker "
        "(%s)\n",
        s.world.world_size, world.source.c_str(), device.c_str(),
        s.group ? s.backend.c_str() : "none", threads, thread_reason.c_str());
    std::printf("memory: %s; %s\n", to_string(allocator).c_str(), to_string(tensor_cache).c_str());
  }
  return s;
}

TrainingSetup set_up_training(const TrainOptions& o, const WorldInfo& world) {
  TrainingSetup s = set_up_process(o, world);
  open_data(o, s);
  build_model(o, s);
  std::string loader_reason;
  const int loader_threads =
      choose_loader_threads(o, world.local_world_size, s.device.is_cuda(), loader_reason);
  s.loader_options = loader_options(o, loader_threads, s.device);
  if (s.is_root()) {
    std::printf("loader: %d thread(s) per rank (%s), %d batches ahead%s\n", loader_threads,
                loader_reason.c_str(), s.loader_options.prefetch(),
                s.loader_options.pin_memory() ? ", in pinned memory" : "");
  }
  // A newcomer asks to be admitted once it is ready: the others wait for it at the step.
  if (s.newcomer) open_fault_tolerant_group(o, s);
  // A rank that never got this far is named here rather than timing out in a collective later.
  // (A newcomer is admitted when the others are well past theirs.)
  if (s.group && !s.newcomer) s.group->monitored_barrier(to_ms(o.timeout), "start-up");
  return s;
}

void sum_over_ranks(ProcessGroup* group, std::vector<double>& values) {
  if (group == nullptr || group->size() == 1) return;
  torch::Tensor t = torch::tensor(values, torch::kFloat64);
  group->allreduce(t).wait();
  for (size_t i = 0; i < values.size(); ++i) values[i] = t[int64_t(i)].item<double>();
}

double max_over_ranks(ProcessGroup* group, double value) {
  if (group == nullptr || group->size() == 1) return value;
  torch::Tensor t = torch::tensor({value}, torch::kFloat64);
  group->allreduce_max(t).wait();
  return t.item<double>();
}

}  // namespace ddp::train

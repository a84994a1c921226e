#include "trainer.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include <torch/torch.h>

#include "ddp/allocator.h"
#include "ddp/atomic_file.h"
#include "ddp/checkpoint.h"
#include "ddp/data/dataset.h"
#include "ddp/data/download.h"
#include "ddp/data/loader.h"
#include "ddp/ddp.h"
#include "ddp/error.h"
#include "ddp/join.h"
#include "ddp/metrics.h"
#include "ddp/precision.h"
#include "ddp/process_group.h"
#include "ddp/sampler.h"
#include "ddp/sync_batchnorm.h"
#include "ddp/zero.h"
#include "models/classifier.h"
#include "progress.h"
#include "step_trace.h"
#include "tensorboard.h"

namespace ddp::train {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(int64_t(seconds * 1000));
}

// Sums `values` over all ranks in place (no-op without a group).
void sum_over_ranks(ProcessGroup* group, std::vector<double>& values) {
  if (group == nullptr || group->size() == 1) return;
  torch::Tensor t = torch::tensor(values, torch::kFloat64);
  group->allreduce(t).wait();
  for (size_t i = 0; i < values.size(); ++i) values[i] = t[int64_t(i)].item<double>();
}

// The largest of `value` over all ranks (itself without a group).
double max_over_ranks(ProcessGroup* group, double value) {
  if (group == nullptr || group->size() == 1) return value;
  torch::Tensor t = torch::tensor({value}, torch::kFloat64);
  group->allreduce_max(t).wait();
  return t.item<double>();
}

// SGD (the reference program's) or Adam, over the parameters it is given.
OptimizerFactory optimizer_factory(const TrainOptions& o) {
  return [o](std::vector<torch::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    if (o.optimizer == "adam") {
      return std::make_unique<torch::optim::Adam>(
          params, torch::optim::AdamOptions(o.lr).weight_decay(o.weight_decay));
    }
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  };
}

// The learning rate for optimizer step `step` (0-based, counted over the whole run): a linear
// warm-up over the first --warmup-epochs, then constant or a half cosine down to 0 at the end.
double scheduled_lr(const TrainOptions& o, int64_t step, int64_t steps_per_epoch) {
  const double total = double(steps_per_epoch) * o.epochs;
  const double warmup = o.warmup_epochs * double(steps_per_epoch);
  const double s = double(step);
  if (s < warmup) return o.lr * (s + 1) / warmup;
  if (o.lr_schedule != "cosine" || total <= warmup) return o.lr;
  const double progress = std::min(1.0, (s - warmup) / (total - warmup));
  return o.lr * 0.5 * (1 + std::cos(M_PI * progress));
}

void set_lr(torch::optim::Optimizer* optimizer, double lr) {
  if (optimizer == nullptr) return;  // an empty ZeRO shard
  for (auto& group : optimizer->param_groups()) group.options().set_lr(lr);
}

// The training sampler's options: shuffled by --seed, padded unless --no-pad.
SamplerOptions sampler_options(const TrainOptions& o) {
  SamplerOptions sampling{true, o.seed, false};
  sampling.pad = !o.no_pad;
  return sampling;
}

// Optimizer steps per epoch: rank 0's (it has the most), the same count on every rank.
int64_t steps_per_epoch(const TrainOptions& o, int64_t dataset_size, int world_size) {
  const DistributedSampler rank0(dataset_size, world_size, 0, sampler_options(o));
  const int64_t batches = (rank0.num_samples() + o.batch_size - 1) / o.batch_size;
  return o.max_steps > 0 ? std::min(o.max_steps, batches) : batches;
}

struct Evaluation {
  double loss = 0;
  double accuracy = 0;
  int64_t total = 0;
  std::vector<double> class_accuracy;  // by label
};

// The model's forward pass (`forward`) under `precision`'s autocast, its logits returned in fp32
// so that the loss and the accuracy are computed in fp32 whatever the precision.
template <class Forward>
torch::Tensor fp32_logits(torch::Device device, Precision precision, const Forward& forward) {
  Autocast autocast(device, precision);
  return forward().to(torch::kFloat);
}

// Each rank evaluates a contiguous, disjoint slice of the test set; sums are all-reduced, so the
// result covers every test image exactly once.
Evaluation evaluate(const std::shared_ptr<models::ClassifierImpl>& model, const data::Dataset& test,
                    const data::LoaderOptions& base, torch::Device device, Precision precision,
                    ProcessGroup* group, int rank, int world) {
  const int64_t n = int64_t(test.size());
  const int64_t begin = n * rank / world, end = n * (rank + 1) / world;
  std::vector<int64_t> indices;
  for (int64_t i = begin; i < end; ++i) indices.push_back(i);
  data::LoaderOptions options = base;
  options.transforms.crop_padding = 0;
  options.transforms.horizontal_flip = false;
  options.batch_size = std::max<int64_t>(base.batch_size, 256);
  data::Loader loader(test, options);
  loader.start_epoch(indices, 0);
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t classes = test.num_classes();
  // loss sum, correct, count, then correct and count per class
  std::vector<double> sums(size_t(3 + 2 * classes), 0.0);
  torch::Tensor class_correct = torch::zeros({classes}, torch::kFloat64),
                class_count = torch::zeros({classes}, torch::kFloat64);
  while (auto batch = loader.next()) {
    batch->to(device);
    const torch::Tensor logits =
        fp32_logits(device, precision, [&] { return model->forward(batch->images); });
    sums[0] += torch::nn::functional::cross_entropy(
                   logits, batch->labels,
                   torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                   .item<double>();
    const torch::Tensor hits = logits.argmax(1).eq(batch->labels);
    sums[1] += hits.sum().item<double>();
    sums[2] += double(batch->labels.size(0));
    class_correct += torch::bincount(batch->labels.masked_select(hits), {}, classes).cpu();
    class_count += torch::bincount(batch->labels, {}, classes).cpu();
  }
  model->train();
  for (int64_t c = 0; c < classes; ++c) {
    sums[size_t(3 + c)] = class_correct[c].item<double>();
    sums[size_t(3 + classes + c)] = class_count[c].item<double>();
  }
  sum_over_ranks(group, sums);
  Evaluation result;
  result.total = int64_t(sums[2]);
  result.loss = sums[2] > 0 ? sums[0] / sums[2] : 0;
  result.accuracy = sums[2] > 0 ? sums[1] / sums[2] : 0;
  for (int64_t c = 0; c < classes; ++c) {
    const double n = sums[size_t(3 + classes + c)];
    result.class_accuracy.push_back(n > 0 ? sums[size_t(3 + c)] / n : 0);
  }
  return result;
}

data::TransformOptions make_transforms(const TrainOptions& o, data::DatasetKind kind) {
  data::TransformOptions t;
  t.normalize = o.normalize;
  if (o.normalize) data::default_normalization(kind, t.mean, t.std);
  t.crop_padding = o.random_crop ? 4 : 0;
  t.horizontal_flip = o.horizontal_flip;
  t.seed = o.seed;
  return t;
}

// FNV-1a over every parameter's bytes: equal on every rank when DDP kept them in step.
uint64_t weights_fingerprint(torch::nn::Module& model) {
  uint64_t h = 1469598103934665603ULL;
  for (const auto& p : model.parameters()) {
    const torch::Tensor c = p.detach().to(torch::kCPU).contiguous();
    const auto* bytes = static_cast<const uint8_t*>(c.data_ptr());
    for (size_t i = 0; i < size_t(c.nbytes()); ++i) h = (h ^ bytes[i]) * 1099511628211ULL;
  }
  return h;
}

// Fault injection for the reliability tests: DDP_FAULT=KIND@STEP[:RANK] with KIND one of nan
// (this rank's loss becomes NaN), throw (an error), hang (stops calling collectives), exit
// (exits abruptly with code 3), at global step STEP on rank RANK (default 0).
struct Fault {
  std::string kind;
  int64_t step = -1;
  int rank = 0;
  static Fault from_environment() {
    Fault f;
    const char* spec = std::getenv("DDP_FAULT");
    if (spec == nullptr || *spec == '\0') return f;
    const std::string text(spec);
    const size_t at = text.find('@');
    const size_t colon = text.find(':', at);
    if (at == std::string::npos)
      throw InvalidArgument(concat("DDP_FAULT: '", text, "' is not KIND@STEP[:RANK]"));
    f.kind = text.substr(0, at);
    if (f.kind != "nan" && f.kind != "throw" && f.kind != "hang" && f.kind != "exit") {
      throw InvalidArgument(
          concat("DDP_FAULT: unknown kind '", f.kind, "'; use nan, throw, hang or exit"));
    }
    f.step = parse_int(
        text.substr(at + 1, colon == std::string::npos ? std::string::npos : colon - at - 1),
        "DDP_FAULT step", 1, 1 << 30);
    if (colon != std::string::npos)
      f.rank = parse_int(text.substr(colon + 1), "DDP_FAULT rank", 0, 1 << 20);
    return f;
  }
  bool due(int64_t global_step, int my_rank) const {
    return !kind.empty() && global_step == step && my_rank == rank;
  }
};

// This process's peak resident memory so far, in MiB.
double peak_rss_mb() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // kilobytes on Linux
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

// The device this rank trains on. auto: this node's GPU LOCAL_RANK when LibTorch has CUDA and
// a GPU is visible, else the CPU; cuda:N: GPU N whatever the rank.
torch::Device training_device(const TrainOptions& o, const WorldInfo& world) {
  if (o.device == "cpu" || (o.device == "auto" && !torch::cuda::is_available())) {
    return torch::kCPU;
  }
  if (!torch::cuda::is_available()) {
    throw InvalidArgument(
        concat("--device ", o.device,
               ": no GPU is usable (this LibTorch has no CUDA, as Debian's 1.13, or no GPU is "
               "visible: check nvidia-smi and CUDA_VISIBLE_DEVICES); use --device cpu"));
  }
  const int gpus = int(torch::cuda::device_count());
  if (o.device.rfind("cuda:", 0) == 0) {
    const int index = std::stoi(o.device.substr(5));
    if (index >= gpus) {
      throw InvalidArgument(concat("--device ", o.device, ": this node has ", gpus,
                                   " GPU(s) visible, cuda:0 to cuda:", gpus - 1));
    }
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  if (world.local_rank >= gpus) {
    throw InvalidArgument(concat("--device cuda: local rank ", world.local_rank,
                                 " needs GPU cuda:", world.local_rank, ", but this node has ", gpus,
                                 " visible; start at most ", gpus, " workers per node"));
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(world.local_rank));
}

// --backend, or the default for the device: NCCL for GPUs (where LibTorch has it), else Gloo.
std::string backend_for(const TrainOptions& o, torch::Device device) {
  if (!o.backend.empty()) return o.backend;
  return device.is_cuda() && ProcessGroup::has_backend("nccl") ? "nccl" : "gloo";
}

// The end of a phase of the step. On a GPU the host only queues the work, so with `exact` the
// host waits for the GPU first, and the phase times mean the same as on a CPU; without it they
// are the times the host took to queue each phase, and the GPU runs on while the host queues the
// next: waiting five times a step cost speed at small batches (--step-trace asks for exact).
Clock::time_point now_after(torch::Device device, bool exact) {
  if (exact && device.is_cuda()) torch::cuda::synchronize(device.index());
  return Clock::now();
}

// Phase times of the training steps of one epoch, on this rank.
struct StepTimes {
  double data_wait = 0, forward = 0, backward = 0, comm_exposed = 0, optimizer = 0;
};

}  // namespace

int choose_threads(const TrainOptions& options, const WorldInfo& world, std::string& reason) {
  if (options.threads > 0) {
    reason = "--threads";
    return options.threads;
  }
  if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp != nullptr && *omp != '\0') {
    reason = "OMP_NUM_THREADS";
    return parse_int(omp, "environment variable OMP_NUM_THREADS", 1, 1024);
  }
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  reason = concat(cores, " cores / ", world.local_world_size, " local workers");
  return std::max(1, cores / std::max(1, world.local_world_size));
}

namespace {

// --data-dir, or where the data set is found by default.
std::string data_dir_of(const TrainOptions& o, data::DatasetKind kind) {
  return o.data_dir.empty() ? data::default_data_dir(kind) : o.data_dir;
}

// What training and evaluation both need: threads, the process group, the data, the model.
struct Session {
  torch::Device device = torch::kCPU;
  std::string backend;
  std::shared_ptr<ProcessGroup> group;
  data::DatasetKind kind = data::DatasetKind::kCifar10;
  std::unique_ptr<data::Dataset> train_set, test_set;
  std::shared_ptr<models::ClassifierImpl> model;
  data::LoaderOptions loader_options;
  Precision precision = Precision::kFp32;
};

Session open_session(const TrainOptions& o, const WorldInfo& world) {
  const bool is_root = world.rank == 0;
  // Before any large tensor: each step's activations then reuse the last step's memory.
  const AllocatorPolicy allocator = retain_freed_memory();
  const TensorCachePolicy tensor_cache = cache_cpu_tensors(world.local_world_size);
  std::string thread_reason;
  const int threads = choose_threads(o, world, thread_reason);
  at::set_num_threads(threads);
  Session s;
  s.device = training_device(o, world);
  s.precision = parse_precision(o.precision);
  s.backend = backend_for(o, s.device);
  if (world.world_size > 1) {
    ProcessGroupOptions pg;
    pg.backend = s.backend;
    // NCCL exchanges tensors on this rank's GPU; Gloo takes CPU (and, in CUDA builds, GPU) ones.
    if (s.backend == "nccl") pg.device = s.device;
    pg.init_method = o.init_method;
    pg.timeout = to_ms(o.timeout);
    pg.rendezvous_timeout = to_ms(o.rendezvous_timeout);
    pg.spin_before_sleep = std::chrono::microseconds(int64_t(o.spin_wait_ms * 1000));
    s.group = ProcessGroup::init(pg, world);
  }
  if (is_root) {
    std::printf(
        "ddp-train: world size %d (%s), device %s, backend %s, %d intra-op thread(s) per worker "
        "(%s)\n",
        world.world_size, world.source.c_str(),
        o.device.rfind("cuda:", 0) == 0 ? o.device.c_str()
        : s.device.is_cuda()            ? "cuda:LOCAL_RANK"
                                        : "cpu",
        world.world_size > 1 ? s.backend.c_str() : "none", threads, thread_reason.c_str());
    std::printf("memory: %s; %s\n", to_string(allocator).c_str(), to_string(tensor_cache).c_str());
  }
  // Data: rank 0 downloads while the others wait, then everyone maps the same files.
  s.kind = data::parse_dataset_kind(o.dataset);
  const std::string dir = data_dir_of(o, s.kind);
  if (o.download) {
    if (s.kind != data::DatasetKind::kCifar10) {
      throw InvalidArgument("--download is only available for --dataset cifar10");
    }
    if (is_root) {
      data::DownloadOptions d;
      if (!o.download_url.empty()) d.url = o.download_url;
      if (!o.download_md5.empty()) d.md5 = o.download_md5;
      data::download_cifar10(dir, d);
    }
    if (s.group) s.group->barrier();
  }
  s.train_set = data::open_dataset(s.kind, dir, data::Split::kTrain);
  s.test_set = data::open_dataset(s.kind, dir, data::Split::kTest);
  const data::ImageShape shape = s.train_set->shape();
  if (shape.height != shape.width) {
    throw DataError(concat(s.train_set->description(), ": images are ", shape.height, "x",
                           shape.width, "; the models need square images"));
  }
  if (is_root) {
    std::printf("data: %s; %s\n", s.train_set->description().c_str(),
                s.test_set->description().c_str());
  }
  // The model, seeded before it is built, as the reference program does.
  torch::manual_seed(o.seed);
  s.model =
      models::make_classifier(o.model, shape.channels, shape.height, s.train_set->num_classes());
  // Batch statistics over all ranks' batches, as one process on the whole batch would have.
  if (s.group) {
    const int synced = convert_sync_batchnorm(*s.model, s.group);
    if (synced > 0 && o.no_pad) {
      throw InvalidArgument(
          concat("--no-pad cannot be used with --model ", o.model, " on ", world.world_size,
                 " ranks: its SyncBatchNorm layers need every rank's batch in every forward, "
                 "which a rank out of data cannot shadow; leave out --no-pad (the shards are "
                 "padded to equal length, as PyTorch's DistributedSampler does)"));
    }
    if (synced > 0 && is_root) {
      std::printf("model: %d SyncBatchNorm layer(s) take their statistics over all %d ranks\n",
                  synced, world.world_size);
    }
  }
  if (o.channels_last) {
    // nn::Module::to() has no memory-format overload in the C++ API: convert the 4-d weights.
    torch::NoGradGuard no_grad;
    for (auto& p : s.model->parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
    }
  }
  s.model->to(s.device);  // before DDP, which broadcasts rank 0's weights on the device
  s.loader_options.batch_size = o.batch_size;
  s.loader_options.channels_last = o.channels_last;
  s.loader_options.transforms = make_transforms(o, s.kind);
  return s;
}

// The label names of the built-in data sets, for the per-class accuracy.
std::vector<std::string> class_names(data::DatasetKind kind) {
  switch (kind) {
    case data::DatasetKind::kCifar10:
      return {"airplane", "automobile", "bird",  "cat",  "deer",
              "dog",      "frog",       "horse", "ship", "truck"};
    case data::DatasetKind::kFashionMnist:
      return {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
              "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
    case data::DatasetKind::kMnist:
      break;
  }
  return {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
}

// The run at a glance, after the last epoch: one row per epoch, the best and the final
// accuracy, and the final accuracy of each class.
void print_summary(const std::vector<EpochResult>& results, data::DatasetKind kind) {
  if (results.empty()) return;
  double seconds = 0, images = 0;
  const EpochResult* best = &results.front();
  for (const auto& r : results) {
    seconds += r.seconds;
    images += r.images_per_second * r.seconds;
    if (r.test_acc > best->test_acc) best = &r;
  }
  std::printf("\nsummary: %zu epoch(s), %.1f s of training, %.0f img/s\n", results.size(), seconds,
              seconds > 0 ? images / seconds : 0.0);
  std::printf("  epoch  train_loss  test_loss  test_acc  seconds    img/s\n");
  for (const auto& r : results) {
    if (r.class_accuracy.empty()) {  // not evaluated (--no-eval)
      std::printf("  %5d  %10.4f  %9s  %8s  %7.1f  %7.0f\n", r.epoch, r.train_loss, "-", "-",
                  r.seconds, r.images_per_second);
    } else {
      std::printf("  %5d  %10.4f  %9.4f  %7.2f%%  %7.1f  %7.0f\n", r.epoch, r.train_loss,
                  r.test_loss, 100 * r.test_acc, r.seconds, r.images_per_second);
    }
  }
  const EpochResult& last = results.back();
  if (last.class_accuracy.empty()) return;  // --no-eval
  std::printf("  best test_acc %.2f%% (epoch %d), final %.2f%%\n", 100 * best->test_acc,
              best->epoch, 100 * last.test_acc);
  const std::vector<std::string> names = class_names(kind);
  std::printf("  final test accuracy per class:\n");
  for (size_t c = 0; c < last.class_accuracy.size(); ++c) {
    const std::string name = c < names.size() ? names[c] : std::to_string(c);
    std::printf("    %-12s %6.2f%%\n", name.c_str(), 100 * last.class_accuracy[c]);
  }
  std::fflush(stdout);
}

// This process's resident memory that maps files, in MiB (the data set's pages, which the
// page cache shares with every other worker reading the same files), from /proc/self/status.
double mapped_file_rss_mb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  long kb = 0;
  while (std::getline(status, line)) {
    if (std::sscanf(line.c_str(), "RssFile: %ld kB", &kb) == 1) break;
  }
  return double(kb) / 1024.0;
}

void print_fingerprint(int rank, torch::nn::Module& model) {
  std::printf(
      "rank %d: final weights fingerprint %016llx; peak RSS %.0f MiB (%.0f MiB of it mapped "
      "files, shared with the other workers)\n",
      rank, (unsigned long long)weights_fingerprint(model), peak_rss_mb(), mapped_file_rss_mb());
  std::fflush(stdout);
}

}  // namespace

void print_plan(const TrainOptions& o, int world_size) {
  const data::DatasetKind kind = data::parse_dataset_kind(o.dataset);
  const std::string dir = data_dir_of(o, kind);
  const auto train_set = data::open_dataset(kind, dir, data::Split::kTrain);
  const auto test_set = data::open_dataset(kind, dir, data::Split::kTest);
  std::printf("configuration:\n%s", config_text(o).c_str());
  const DistributedSampler sampler(int64_t(train_set->size()), world_size, 0, sampler_options(o));
  const int64_t steps = steps_per_epoch(o, int64_t(train_set->size()), world_size);
  std::printf("plan: %d rank(s); %s\n", world_size, train_set->description().c_str());
  std::printf(
      "  %s: %lld training images per epoch (%lld padded in all), %lld steps of %lld, "
      "%lld images per step over all ranks\n",
      o.no_pad ? "rank 0 (--no-pad: later ranks may have one image fewer)" : "each rank",
      (long long)sampler.num_samples(),
      (long long)(sampler.total_size() - int64_t(train_set->size())), (long long)steps,
      (long long)o.batch_size, (long long)(o.batch_size * world_size));
  std::printf(
      "  %d epoch(s), %lld optimizer steps; evaluation: %s\n", o.epochs,
      (long long)(steps * o.epochs),
      o.evaluate ? concat(test_set->size(), " test images split over the ranks").c_str() : "off");
  if (!o.checkpoint_dir.empty()) {
    std::printf("  checkpoints every %d epoch(s) in %s, keeping %d\n", o.checkpoint_every,
                o.checkpoint_dir.c_str(), o.keep);
  }
}

void run_evaluation(const TrainOptions& o, const WorldInfo& world) {
  if (o.checkpoint.empty()) throw InvalidArgument("evaluate needs --checkpoint FILE");
  Session s = open_session(o, world);
  load_state_dict(*s.model, read_state_dict(o.checkpoint), o.checkpoint);
  const Evaluation e = evaluate(s.model, *s.test_set, s.loader_options, s.device, s.precision,
                                s.group.get(), world.rank, world.world_size);
  if (world.rank == 0) {
    std::printf("evaluate %s: test_loss %.6f  test_acc %.2f%% (%lld images)\n",
                o.checkpoint.c_str(), e.loss, 100 * e.accuracy, (long long)e.total);
  }
}

std::vector<EpochResult> run_training(const TrainOptions& o, const WorldInfo& world) {
  const int rank = world.rank;
  const int world_size = world.world_size;
  const bool is_root = rank == 0;
  // The output files first: a path that cannot be written fails before start-up's work.
  MetricsWriter metrics(is_root ? o.metrics : "");
  StepTrace trace(o.step_trace, rank);
  const bool exact_phases = trace.enabled();  // see now_after()
  std::optional<TensorBoardWriter> tensorboard;
  if (is_root && !o.tensorboard.empty()) tensorboard.emplace(o.tensorboard);
  Session session = open_session(o, world);
  std::shared_ptr<ProcessGroup>& group = session.group;
  const auto& train_set = session.train_set;
  const auto& test_set = session.test_set;
  const std::shared_ptr<models::ClassifierImpl>& model = session.model;
  const data::LoaderOptions& loader_options = session.loader_options;
  const torch::Device device = session.device;
  // The optimizer: unsharded, or with --zero each rank keeps the state of its shard only.
  const OptimizerFactory make_optimizer = optimizer_factory(o);
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::optional<ZeroRedundancyOptimizer> zero;
  if (o.zero && group) {
    zero.emplace(model->parameters(), group, make_optimizer);
  } else {
    optimizer = make_optimizer(model->parameters());
  }
  // Every rank counts the same steps per epoch, so the learning-rate schedule agrees.
  const int64_t epoch_steps = steps_per_epoch(o, int64_t(session.train_set->size()), world_size);
  double lr = o.lr;
  auto optimizer_step = [&](int64_t step) {
    lr = scheduled_lr(o, step, epoch_steps);
    if (zero) {
      set_lr(zero->local(), lr);
      zero->step();
    } else {
      set_lr(optimizer.get(), lr);
      optimizer->step();
    }
  };
  auto zero_grad = [&] {
    if (zero) {
      zero->zero_grad();
    } else {
      optimizer->zero_grad();
    }
  };

  // Where to start: a checkpoint (explicit, or the newest after a launcher restart), a state
  // dict, or the seeded initial weights. Every rank reads the same file.
  int start_epoch = 1;
  int64_t global_step = 0;
  std::string resume = o.resume;
  if (resume.empty() && world.restart_count > 0 && !o.checkpoint_dir.empty()) resume = "auto";
  if (resume == "auto") resume = latest_checkpoint(o.checkpoint_dir);
  if (!resume.empty()) {
    // With --zero every rank reads the whole optimizer state and keeps its shard's.
    std::unique_ptr<torch::optim::Optimizer> full =
        zero ? make_optimizer(model->parameters()) : nullptr;
    const CheckpointState state =
        load_checkpoint(resume, *model, zero ? full.get() : optimizer.get());
    if (zero) zero->load_from_full(*full);
    start_epoch = int(state.epoch) + 1;
    global_step = state.global_step;
    if (state.rng_state.defined()) {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      gen.set_state(state.rng_state);
    }
    if (is_root) {
      std::printf("resumed from %s after epoch %lld\n", resume.c_str(), (long long)state.epoch);
      if (state.world_size != world_size) {
        std::printf(
            "note: the checkpoint was written with world size %lld, this run has %d: the data is "
            "re-sharded, so the result is not bit-identical to an uninterrupted run\n",
            (long long)state.world_size, world_size);
      }
    }
  } else if (!o.init_from.empty()) {
    load_state_dict(*model, read_state_dict(o.init_from), o.init_from);
    if (is_root) std::printf("initial weights from %s\n", o.init_from.c_str());
  }
  if (!o.checkpoint_dir.empty() && is_root) make_directories(o.checkpoint_dir);

  std::optional<DistributedDataParallel<models::ClassifierImpl>> ddp_model;
  if (group && !o.no_sync_baseline) {
    ddp_model.emplace(
        model, group,
        DDPOptions().bucket_cap_mb(o.bucket_cap_mb).first_bucket_cap_mb(o.first_bucket_cap_mb));
    ddp_model->register_comm_hook(make_comm_hook(o.comm_hook));
  } else if (group && is_root) {
    std::printf("%s: gradients are NOT averaged; for measuring DDP's overhead only\n",
                o.lockstep_baseline ? "--lockstep-baseline" : "--no-sync-baseline");
  }
  // --lockstep-baseline: the ranks still wait for each other after every backward, through the
  // all-reduce DDP ends backward with, but of one float instead of the gradients: what keeping
  // them in step costs by itself.
  const bool lockstep = group && o.lockstep_baseline;
  torch::Tensor lockstep_token = lockstep ? torch::zeros({1}) : torch::Tensor();
  // Start in step, as DDP's constructor (its broadcast of the weights) makes the ranks; otherwise
  // the first step's wait would absorb the ranks' different start-up times.
  if (lockstep) group->allreduce(lockstep_token).wait();

  DistributedSampler sampler(int64_t(train_set->size()), world_size, rank, sampler_options(o));
  data::Loader loader(*train_set, loader_options);

  metrics.write(JsonRecord().add("config", config_text(o)).add("world_size", world_size));
  if (is_root) {  // the effective configuration (flags, --config file and preset merged)
    std::string line = config_text(o);
    std::replace(line.begin(), line.end(), '\n', ';');
    std::printf("config: %s\n", line.c_str());
  }
  const Fault fault = Fault::from_environment();
  std::vector<EpochResult> results;
  for (int epoch = start_epoch; epoch <= o.epochs; ++epoch) {
    sampler.set_epoch(epoch - 1);
    loader.start_epoch(sampler.indices(), epoch - 1);
    const int64_t steps =
        o.max_steps > 0 ? std::min(o.max_steps, loader.num_batches()) : loader.num_batches();
    StepTimes times;
    int64_t skipped_steps = 0;
    // One global step's update, once the gradients are averaged: every rank sees the same
    // average, so every rank reaches the same verdict on it. A non-finite gradient stops the job
    // (with `stop_message()`) or, with --on-nan skip, consumes the step without an update.
    auto update = [&](const std::function<std::string()>& stop_message) {
      if (!gradients_finite(*model)) {
        if (o.on_nan == "stop") throw Error(stop_message());
        ++skipped_steps;
        ++global_step;
        zero_grad();
        return false;
      }
      optimizer_step(global_step++);
      return true;
    };
    // --no-pad: a rank out of batches shadows the others' steps, optimizer step included, so
    // weights and optimizer state stay identical everywhere.
    std::optional<Join> join;
    if (ddp_model && o.no_pad) {
      join.emplace(*ddp_model, [&] {
        update([&] {
          return concat("rank ", rank, ": non-finite gradient at epoch ", epoch,
                        " (averaged from the ranks still training; this one had joined)");
        });
      });
    }
    torch::Tensor loss_sum = torch::zeros({}, torch::dtype(torch::kFloat64).device(device));
    int64_t images = 0;
    ProgressBar progress(is_root && ProgressBar::stdout_is_terminal(), epoch, o.epochs, steps);
    const auto epoch_start = Clock::now();
    for (int64_t step = 0; step < steps; ++step) {
      auto t0 = Clock::now();
      std::optional<data::Batch> batch = loader.next();
      if (!batch) break;
      batch->to(device);
      auto t1 = now_after(device, exact_phases);
      const torch::Tensor logits = fp32_logits(device, session.precision, [&] {
        return ddp_model ? ddp_model->forward(batch->images) : model->forward(batch->images);
      });
      torch::Tensor loss = torch::nn::functional::cross_entropy(logits, batch->labels);
      if (fault.due(global_step + 1, rank)) {
        if (fault.kind == "nan") loss = loss * std::nan("");
        if (fault.kind == "throw")
          throw Error(
              concat("rank ", rank, ": injected fault (DDP_FAULT) at step ", global_step + 1));
        if (fault.kind == "exit") std::_Exit(3);
        if (fault.kind == "hang") {
          std::fprintf(stderr, "rank %d: injected hang (DDP_FAULT) at step %lld\n", rank,
                       (long long)global_step + 1);
          while (true) std::this_thread::sleep_for(std::chrono::seconds(1));  // never returns
        }
      }
      auto t2 = now_after(device, exact_phases);
      zero_grad();
      loss.backward();
      double lockstep_wait = 0;
      if (lockstep) {
        const auto start = Clock::now();
        group->allreduce(lockstep_token).wait();
        lockstep_wait = since(start);
      }
      auto t3 = now_after(device, exact_phases);
      const bool updated = update([&] {
        const double value = loss.item<double>();
        return concat("rank ", rank, ": non-finite ", std::isfinite(value) ? "gradient" : "loss",
                      " (loss ", value, ") at epoch ", epoch, " step ", step + 1,
                      "; stopped before the optimizer step, so the weights are the last finite "
                      "ones. Lower --lr, or pass --on-nan skip");
      });
      if (!updated) continue;  // the batch is consumed, only the update is skipped
      auto t4 = now_after(device, exact_phases);
      const double exposed =
          ddp_model ? ddp_model->stats().last_exposed_comm_seconds : lockstep_wait;
      times.data_wait += std::chrono::duration<double>(t1 - t0).count();
      times.forward += std::chrono::duration<double>(t2 - t1).count();
      times.backward += std::chrono::duration<double>(t3 - t2).count() - exposed;
      times.comm_exposed += exposed;
      times.optimizer += std::chrono::duration<double>(t4 - t3).count();
      if (trace.enabled()) {
        const auto backward_done = t3 - std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(exposed));
        trace.write({epoch, global_step, t0, t1, t2, backward_done, t3, t4});
      }
      const int64_t count = batch->labels.size(0);
      loss_sum += loss.detach().to(torch::kFloat64) * double(count);
      images += count;
      if (is_root && global_step % o.log_every == 0) {
        const double value = loss.item<double>();
        metrics.write(JsonRecord()
                          .add("step", global_step)
                          .add("epoch", epoch)
                          .add("loss", value)
                          .add("lr", lr));
        if (tensorboard) {
          tensorboard->scalar("train/loss", value, global_step);
          tensorboard->scalar("train/lr", lr, global_step);
        }
        if (!progress.live()) {
          std::printf("epoch %d step %lld/%lld loss %.4f\n", epoch, (long long)(step + 1),
                      (long long)steps, value);
          std::fflush(stdout);
        }
      }
      progress.update(step + 1, images * world_size, [&] { return loss.item<double>(); });
    }
    if (join) join->join();  // shadowed steps count in global_step too
    // The job's epoch ends when its last rank's does: with DDP the ranks finish within a step of
    // each other, under --no-sync-baseline they drift apart, and the slowest one is the job's pace.
    const double train_seconds = max_over_ranks(group.get(), since(epoch_start));
    std::vector<double> sums = {loss_sum.item<double>(), double(images)};
    sum_over_ranks(group.get(), sums);
    EpochResult r;
    r.epoch = epoch;
    r.train_loss = sums[1] > 0 ? sums[0] / sums[1] : 0;
    r.seconds = train_seconds;
    r.images_per_second = train_seconds > 0 ? sums[1] / train_seconds : 0;
    Evaluation eval;
    if (o.evaluate) {
      eval = evaluate(model, *test_set, loader_options, device, session.precision, group.get(),
                      rank, world_size);
      r.test_loss = eval.loss;
      r.test_acc = eval.accuracy;
      r.class_accuracy = eval.class_accuracy;
    }
    results.push_back(r);
    // Optimizer memory: this rank's state, and all ranks' together (= the unsharded size).
    std::vector<double> state_mb = {
        double(zero ? zero->local_state_bytes() : optimizer_state_bytes(*optimizer)) / 1e6};
    const double rank0_state_mb = state_mb[0];
    sum_over_ranks(group.get(), state_mb);
    if (zero && is_root && epoch == start_epoch) {
      std::printf("optimizer state (--zero): %.2f MB on rank 0, %.2f MB over all %d ranks\n",
                  rank0_state_mb, state_mb[0], world_size);
    }
    progress.finish();
    if (is_root) {
      const CpuTensorCacheStats tensor_cache = cpu_tensor_cache_stats();
      JsonRecord record;
      record.add("epoch", epoch).add("train_loss", r.train_loss);
      if (o.evaluate) record.add("test_loss", r.test_loss).add("test_acc", r.test_acc);
      record.add("train_images", int64_t(sums[1]))
          .add("epoch_seconds", r.seconds)
          .add("images_per_second", r.images_per_second)
          .add("data_wait_seconds", times.data_wait)
          .add("forward_seconds", times.forward)
          .add("backward_seconds", times.backward)
          .add("comm_exposed_seconds", times.comm_exposed)
          .add("optimizer_seconds", times.optimizer)
          .add("comm_bytes_per_step",
               ddp_model ? ddp_model->stats().bytes_communicated_per_iteration : 0)
          .add("skipped_steps", skipped_steps)
          .add("optimizer_state_mb", rank0_state_mb)
          .add("peak_rss_mb", peak_rss_mb())
          .add("tensor_cache_mb", double(tensor_cache.held_bytes) / (1 << 20))
          .add("tensor_cache_misses", tensor_cache.misses);
      metrics.write(record);
      if (tensorboard) {  // epoch curves against the same step axis as the step curves
        tensorboard->scalar("epoch/train_loss", r.train_loss, global_step);
        tensorboard->scalar("epoch/images_per_second", r.images_per_second, global_step);
        if (o.evaluate) {
          tensorboard->scalar("epoch/test_loss", r.test_loss, global_step);
          tensorboard->scalar("epoch/test_accuracy", r.test_acc, global_step);
        }
      }
      if (o.evaluate) {
        std::printf(
            "epoch %d/%d  train_loss %.4f  test_loss %.4f  test_acc %.2f%% (%lld images)"
            "  %.1f s  %.0f img/s\n",
            epoch, o.epochs, r.train_loss, r.test_loss, 100 * r.test_acc, (long long)eval.total,
            r.seconds, r.images_per_second);
      } else {
        std::printf("epoch %d/%d  train_loss %.4f  %.1f s  %.0f img/s\n", epoch, o.epochs,
                    r.train_loss, r.seconds, r.images_per_second);
      }
      std::fflush(stdout);
    }
    if (!o.checkpoint_dir.empty() && (epoch % o.checkpoint_every == 0 || epoch == o.epochs)) {
      // Sharded state is gathered on rank 0 first (a collective: every rank takes part).
      std::unique_ptr<torch::optim::Optimizer> consolidated = zero ? zero->consolidate(0) : nullptr;
      if (is_root) {
        CheckpointState state;
        state.epoch = epoch;
        state.global_step = global_step;
        state.world_size = world_size;
        state.config = config_text(o);
        state.rng_state = at::detail::getDefaultCPUGenerator().get_state();
        save_checkpoint(checkpoint_path(o.checkpoint_dir, epoch), *model,
                        zero ? *consolidated : *optimizer, state);
        prune_checkpoints(o.checkpoint_dir, o.keep);
      }
      if (group) group->barrier();  // nobody goes on (or reads it) before it is complete
    }
  }
  if (!o.export_path.empty() && is_root) {
    export_state_dict(o.export_path, *model);
    std::printf("exported the model's state dict to %s\n", o.export_path.c_str());
  }
  if (is_root) print_summary(results, session.kind);
  print_fingerprint(rank, *model);
  return results;
}

}  // namespace ddp::train

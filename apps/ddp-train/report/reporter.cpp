#include "report/reporter.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include <c10/util/StringUtil.h>

#include "ddp/allocator.h"
#include "ddp/error.h"

namespace ddp::train {
namespace {

// This process's peak resident memory so far, in MiB.
double peak_rss_mb() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // kilobytes on Linux
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

JsonRecord epoch_record(const EpochReport& e, bool evaluated) {
  const EpochResult& r = e.result;
  const CpuTensorCacheStats tensor_cache = cpu_tensor_cache_stats();
  JsonRecord record;
  record.add("epoch", r.epoch).add("train_loss", r.train_loss);
  if (evaluated) record.add("test_loss", r.test_loss).add("test_acc", r.test_acc);
  record.add("train_images", e.train_images)
      .add("epoch_seconds", r.seconds)
      .add("images_per_second", r.images_per_second)
      .add("data_wait_seconds", e.times.data_wait)
      .add("forward_seconds", e.times.forward)
      .add("backward_seconds", e.times.backward)
      .add("comm_exposed_seconds", e.times.comm_exposed)
      .add("optimizer_seconds", e.times.optimizer)
      .add("comm_bytes_per_step", e.comm_bytes_per_step)
      .add("skipped_steps", e.skipped_steps)
      .add("overflowed_steps", e.overflowed_steps)
      .add("loss_scale", e.loss_scale)
      .add("bad_samples", e.bad_samples)
      .add("optimizer_state_mb", e.optimizer_state_mb)
      .add("peak_rss_mb", peak_rss_mb())
      .add("tensor_cache_mb", double(tensor_cache.held_bytes) / (1 << 20))
      .add("tensor_cache_misses", tensor_cache.misses);
  e.stragglers.add_to(record);
  return record;
}

// --metrics FILE, named in the error when it cannot be opened.
MetricsWriter open_metrics(const std::string& path) {
  try {
    return MetricsWriter(path);
  } catch (const IoError& e) {
    throw IoError(c10::str("--metrics: ", e.what()));
  }
}

}  // namespace

Reporter::Reporter(const TrainOptions& options, int rank, int world_size)
    : options_(options),
      root_(rank == 0),
      world_size_(world_size),
      metrics_(open_metrics(root_ ? options.metrics : "")) {
  if (root_ && !options.tensorboard.empty()) tensorboard_.emplace(options.tensorboard);
}

void Reporter::start() {
  metrics_.write(JsonRecord().add("config", config_text(options_)).add("world_size", world_size_));
  if (!root_) return;
  // What differs from the reference program (flags, --config file and preset merged), on one
  // line; --dry-run, the metrics and every checkpoint hold the whole configuration.
  std::string line = config_text(options_, /*only_changed=*/true);
  std::replace(line.begin(), line.end(), '\n', ';');
  std::printf("config (differs from the defaults): %s\n", line.c_str());
}

void Reporter::start_epoch(int epoch, int64_t steps) {
  epoch_steps_ = steps;
  progress_ = std::make_unique<ProgressBar>(root_ && ProgressBar::stdout_is_terminal(), epoch,
                                            options_.epochs, steps);
}

void Reporter::step(int epoch, int64_t step, int64_t global_step, const torch::Tensor& loss,
                    double lr, int64_t images) {
  if (root_ && global_step % options_.log_every == 0) {
    const double value = loss.item<double>();
    metrics_.write(
        JsonRecord().add("step", global_step).add("epoch", epoch).add("loss", value).add("lr", lr));
    if (tensorboard_) {
      tensorboard_->scalar("train/loss", value, global_step);
      tensorboard_->scalar("train/lr", lr, global_step);
    }
    if (!progress_->live()) {
      std::printf("epoch %d step %lld/%lld loss %.4f\n", epoch, (long long)(step + 1),
                  (long long)epoch_steps_, value);
      std::fflush(stdout);
    }
  }
  progress_->update(step + 1, images * world_size_, [&] { return loss.item<double>(); });
}

void Reporter::end_epoch(const EpochReport& report, int64_t global_step) {
  if (progress_) progress_->finish();
  if (!root_) return;
  const EpochResult& r = report.result;
  const bool evaluated = !options_.no_eval;
  metrics_.write(epoch_record(report, evaluated));
  if (tensorboard_) {  // epoch curves against the same step axis as the step curves
    tensorboard_->scalar("epoch/train_loss", r.train_loss, global_step);
    tensorboard_->scalar("epoch/images_per_second", r.images_per_second, global_step);
    if (evaluated) {
      tensorboard_->scalar("epoch/test_loss", r.test_loss, global_step);
      tensorboard_->scalar("epoch/test_accuracy", r.test_acc, global_step);
    }
  }
  if (evaluated) {
    std::printf(
        "epoch %d/%d  train_loss %.4f  test_loss %.4f  test_acc %.2f%% (%lld images)"
        "  %.1f s  %.0f img/s\n",
        r.epoch, options_.epochs, r.train_loss, r.test_loss, 100 * r.test_acc,
        (long long)r.test_images, r.seconds, r.images_per_second);
  } else {
    std::printf("epoch %d/%d  train_loss %.4f  %.1f s  %.0f img/s\n", r.epoch, options_.epochs,
                r.train_loss, r.seconds, r.images_per_second);
  }
  if (world_size_ > 1) std::printf("  %s\n", report.stragglers.line().c_str());
  if (options_.precision == Precision::kFp16) {
    std::printf("  loss scale %g; %lld step(s) skipped: their fp16 gradients overflowed\n",
                report.loss_scale, (long long)report.overflowed_steps);
  }
  std::fflush(stdout);
}

void Reporter::membership_change(const JsonRecord& record) {
  if (root_) metrics_.write(record);
}

void Reporter::summary(const std::vector<EpochResult>& results) const {
  if (!root_ || results.empty()) return;
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
  const std::vector<std::string>& names = class_names_;
  std::printf("  final test accuracy per class:\n");
  for (size_t c = 0; c < last.class_accuracy.size(); ++c) {
    const std::string name = c < names.size() ? names[c] : std::to_string(c);
    std::printf("    %-12s %6.2f%%\n", name.c_str(), 100 * last.class_accuracy[c]);
  }
  std::fflush(stdout);
}

void print_fingerprint(int rank, torch::nn::Module& model) {
  std::printf(
      "rank %d: final weights fingerprint %016llx; peak RSS %.0f MiB (%.0f MiB of it mapped "
      "files, shared with the other workers)\n",
      rank, (unsigned long long)weights_fingerprint(model), peak_rss_mb(), mapped_file_rss_mb());
  std::fflush(stdout);
}

}  // namespace ddp::train

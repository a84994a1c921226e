#include "ddp/checkpoint/async_checkpoint.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "checkpoint/checkpoint_internal.h"
#include "ddp/error.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

// The same value with every tensor copied into host memory of its own: training may change the
// originals from the next step on.
c10::IValue host_copy(const c10::IValue& value) {
  if (value.isTensor())
    return value.toTensor()
        .detach()
        .to(torch::kCPU, /*non_blocking=*/false,
            /*copy=*/true)
        .contiguous();
  if (value.isGenericDict()) {
    const auto dict = value.toGenericDict();
    c10::impl::GenericDict copy(dict.keyType(), dict.valueType());
    for (const auto& entry : dict) copy.insert(entry.key(), host_copy(entry.value()));
    return copy;
  }
  if (value.isList()) {
    const auto list = value.toList();
    c10::impl::GenericList copy(list.elementType());
    for (const c10::IValue& item : list) copy.push_back(host_copy(item));
    return copy;
  }
  return value;  // strings, numbers: immutable
}

}  // namespace

AsyncCheckpointWriter::AsyncCheckpointWriter(int keep) : keep_(keep) {}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  try {
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp: the last checkpoint was not written: %s\n", e.what());
  }
}

void AsyncCheckpointWriter::wait() {
  if (writer_.joinable()) writer_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

double AsyncCheckpointWriter::last_write_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return write_seconds_;
}

void AsyncCheckpointWriter::write(const std::string& path, const torch::nn::Module& module,
                                  torch::optim::Optimizer& optimizer,
                                  const CheckpointState& state) {
  wait();
  const auto start = Clock::now();
  c10::IValue snapshot = host_copy(checkpoint_value(module, optimizer, state));
  snapshot_seconds_ = std::chrono::duration<double>(Clock::now() - start).count();
  writer_ = std::thread([this, path, snapshot = std::move(snapshot)] {
    const auto begin = Clock::now();
    std::exception_ptr error;
    try {
      write_checkpoint_value(path, snapshot);
      if (keep_ > 0) prune_checkpoints(std::filesystem::path(path).parent_path().string(), keep_);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = error;
    write_seconds_ = std::chrono::duration<double>(Clock::now() - begin).count();
  });
}

}  // namespace ddp

// retain_freed_memory(): a step's large tensors come from, and go back to, the process's heap.
// cpu_tensor_cache(): a freed large block is the next allocation of its size.
#include "ddp/allocator.h"
#include "ddp/error.h"

#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <c10/core/impl/alloc_cpu.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

constexpr size_t kMiB = size_t(1) << 20;

// Unsets the MALLOC_*_ variables for the test, restoring them after.
class MallocEnvironment {
 public:
  MallocEnvironment() {
    for (const char* name : kNames) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
      ::unsetenv(name);
    }
  }
  ~MallocEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value) ::setenv(name, value->c_str(), 1);
    }
  }

 private:
  static constexpr const char* kNames[] = {"MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_",
                                           "MALLOC_TRIM_THRESHOLD_"};
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

// Whether the process's heap can grow by brk, which the retained policy builds on. Under
// qemu-user (scripts/arm64-check.sh) it cannot: glibc then maps each growth on its own.
bool heap_grows_by_brk() {
  constexpr intptr_t kStep = 1 << 20;
  if (::sbrk(kStep) == reinterpret_cast<void*>(-1)) return false;
  ::sbrk(-kStep);
  return true;
}

TEST(Allocator, LargeTensorsComeFromTheHeapAndStayThereWhenFreed) {
  if (!heap_grows_by_brk()) GTEST_SKIP() << "this process's heap cannot grow by brk (qemu-user)";
  MallocEnvironment clean;
  ASSERT_EQ(ddp::retain_freed_memory(), ddp::AllocatorPolicy::kRetained);
  const size_t mapped_before = mallinfo2().hblkhd;  // blocks mmapped before the call
  {
    // 16 MiB, the reference Net's first activation at batch 64; 96 MiB, above a thread
    // arena's heap size.
    const torch::Tensor activation = torch::ones({64, 64, 32, 32});
    const torch::Tensor huge = torch::ones({int64_t(96 * kMiB / 4)});
    EXPECT_EQ(mallinfo2().hblkhd, mapped_before) << "a tensor was served by mmap";
    EXPECT_EQ(huge.sum().item<double>(), double(96 * kMiB / 4));
  }
  // Both are free now, and their memory is still the process's, ready for the next step.
  EXPECT_GE(mallinfo2().fordblks, 112 * kMiB);
}

TEST(Allocator, TheUsersMallocVariablesWin) {
  MallocEnvironment clean;
  ::setenv("MALLOC_TRIM_THRESHOLD_", "131072", 1);
  EXPECT_EQ(ddp::retain_freed_memory(), ddp::AllocatorPolicy::kLeftToEnvironment);
  EXPECT_NE(ddp::to_string(ddp::AllocatorPolicy::kLeftToEnvironment).find("MALLOC_"),
            std::string::npos);
  ::unsetenv("MALLOC_TRIM_THRESHOLD_");
}

// The cache's counters since `before`.
ddp::CpuTensorCacheStats since(const ddp::CpuTensorCacheStats& before) {
  ddp::CpuTensorCacheStats now = ddp::cpu_tensor_cache_stats();
  now.hits -= before.hits;
  now.misses -= before.misses;
  return now;
}

TEST(CpuTensorCache, AFreedLargeBlockIsTheNextAllocationOfItsSize) {
  c10::Allocator& cache = *ddp::cpu_tensor_cache();
  ddp::empty_cpu_tensor_cache();
  void* first = nullptr;
  {
    const c10::DataPtr block = cache.allocate(4 * kMiB);
    first = block.get();
    std::memset(first, 1, 4 * kMiB);
  }
  const auto before = ddp::cpu_tensor_cache_stats();
  EXPECT_GE(before.idle_bytes, 4 * kMiB);
  {
    const c10::DataPtr again = cache.allocate(4 * kMiB);
    EXPECT_EQ(again.get(), first);
    const c10::DataPtr other = cache.allocate(4 * kMiB);  // the first is in use
    EXPECT_NE(other.get(), first);
  }
  {
    const c10::DataPtr smaller = cache.allocate(3 * kMiB);  // fits, wasting a quarter
    EXPECT_NE(smaller.get(), nullptr);
  }
  const auto counted = since(before);
  EXPECT_EQ(counted.hits, 2);
  EXPECT_EQ(counted.misses, 1);
  EXPECT_GE(counted.idle_bytes, 8 * kMiB);
}

TEST(CpuTensorCache, IdleBlocksStayUntilTheyPassTheLimit) {
  c10::Allocator& cache = *ddp::cpu_tensor_cache();
  ddp::empty_cpu_tensor_cache();  // no block from another test fits
  EXPECT_EQ(ddp::cpu_tensor_cache_stats().idle_bytes, 0u);
  { const c10::DataPtr block = cache.allocate(8 * kMiB); }
  const auto before = ddp::cpu_tensor_cache_stats();
  ASSERT_GE(before.idle_bytes, 8 * kMiB);
  {
    // 3 MiB would waste more than half of an 8 MiB block: a miss, and the idle blocks stay.
    const c10::DataPtr block = cache.allocate(3 * kMiB);
    EXPECT_EQ(since(before).misses, 1);
    EXPECT_EQ(since(before).idle_bytes, before.idle_bytes);
  }
  // Past the limit, a miss hands them all back to malloc first.
  ddp::set_cpu_tensor_cache_limit(kMiB);
  {
    const c10::DataPtr block = cache.allocate(5 * kMiB / 4);
    EXPECT_EQ(since(before).misses, 2);
    EXPECT_EQ(since(before).idle_bytes, 0u);
    EXPECT_EQ(since(before).held_bytes, before.held_bytes - before.idle_bytes + 5 * kMiB / 4);
  }
  ddp::set_cpu_tensor_cache_limit(size_t(1) << 40);
}

TEST(CpuTensorCache, TheEnvironmentTurnsItOffOrIsRefused) {
  c10::Allocator* libtorchs = c10::GetAllocator(c10::DeviceType::CPU);
  ::setenv("DDP_CPU_TENSOR_CACHE", "0", 1);
  EXPECT_EQ(ddp::cache_cpu_tensors(), ddp::TensorCachePolicy::kTurnedOff);
  EXPECT_EQ(c10::GetAllocator(c10::DeviceType::CPU), libtorchs);
  ::setenv("DDP_CPU_TENSOR_CACHE", "off", 1);
  try {
    ddp::cache_cpu_tensors();
    ADD_FAILURE() << "DDP_CPU_TENSOR_CACHE=off was accepted";
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("DDP_CPU_TENSOR_CACHE is 'off'"), std::string::npos)
        << e.what();
  }
  ::unsetenv("DDP_CPU_TENSOR_CACHE");
  EXPECT_EQ(c10::GetAllocator(c10::DeviceType::CPU), libtorchs);
}

TEST(CpuTensorCache, SmallBlocksAndRawAllocationsAreLibTorchsAsBefore) {
  c10::Allocator& cache = *ddp::cpu_tensor_cache();
  const auto before = ddp::cpu_tensor_cache_stats();
  {
    const c10::DataPtr small = cache.allocate(1000);
    ASSERT_NE(small.get(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(small.get()) % 64, 0u);  // LibTorch's alignment
    const c10::DataPtr empty = cache.allocate(0);
  }
  EXPECT_EQ(since(before).misses, 0);
  EXPECT_EQ(since(before).held_bytes, before.held_bytes);
  void* raw = cache.raw_allocate(2 * kMiB);  // data pointer and context are the same
  cache.raw_deallocate(raw);
  EXPECT_GE(since(before).idle_bytes, 2 * kMiB);
  // A small tensor frees itself to malloc; raw_deallocate() of one goes through the one
  // raw_deleter(), which frees a block the cache does not hold.
  EXPECT_EQ(cache.allocate(1000).get_deleter(), &c10::free_cpu);
  const auto idle = since(before).idle_bytes;
  cache.raw_deallocate(cache.raw_allocate(1000));
  EXPECT_EQ(since(before).idle_bytes, idle);
}

TEST(CpuTensorCache, InstalledItServesTensorsAndABlockIsNeverHandedOutTwice) {
  c10::Allocator* libtorchs = c10::GetAllocator(c10::DeviceType::CPU);
  // As ddp-train with 4 workers: their idle blocks together under an eighth of the memory.
  ASSERT_EQ(ddp::cache_cpu_tensors(4), ddp::TensorCachePolicy::kInstalled);
  const auto before = ddp::cpu_tensor_cache_stats();
  EXPECT_EQ(before.idle_limit_bytes,
            size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE)) / 8 / 4);
  // Two threads, as the loader and the training thread: each fills its tensors with its own
  // value and checks them before freeing; a block handed to both would show the other's.
  std::atomic<int> wrong{0};
  auto work = [&](float value) {
    for (int i = 0; i < 200; ++i) {
      const torch::Tensor a = torch::full({int64_t(kMiB / 2)}, value);  // 2 MiB
      const torch::Tensor b = torch::full({int64_t(kMiB)}, value);      // 4 MiB
      if (!a.eq(value).all().item<bool>() || !b.eq(value).all().item<bool>()) ++wrong;
    }
  };
  std::thread other(work, 2.0f);
  work(1.0f);
  other.join();
  c10::SetAllocator(c10::DeviceType::CPU, libtorchs);
  EXPECT_EQ(wrong.load(), 0);
  const auto counted = since(before);
  EXPECT_GE(counted.hits, 700);  // 800 allocations, a few new blocks
  EXPECT_LE(counted.misses, 100);
}

}  // namespace

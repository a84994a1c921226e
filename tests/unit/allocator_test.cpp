// retain_freed_memory(): a step's large tensors come from, and go back to, the process's heap.
#include "ddp/allocator.h"

#include <malloc.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

TEST(Allocator, LargeTensorsComeFromTheHeapAndStayThereWhenFreed) {
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

}  // namespace

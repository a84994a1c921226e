#include "ddp/allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

#include "ddp/environment.h"
#include "ddp/error.h"
#include "torch_compat.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ddp {

AllocatorPolicy retain_freed_memory() {
  for (const char* name :
       {env::kMallocMmapMax, env::kMallocMmapThreshold, env::kMallocTrimThreshold}) {
    if (std::getenv(name) != nullptr) return AllocatorPolicy::kLeftToEnvironment;
  }
#if defined(__GLIBC__)
  // Blocks larger than a thread arena's heap (64 MiB) come from the main heap (brk), which
  // glibc retries when an arena cannot grow, so no size is refused for want of mmap.
  // mallopt returns 1 on success; an interposed malloc's mallopt (jemalloc, tcmalloc) 0.
  const bool no_mmap = mallopt(M_MMAP_MAX, 0) == 1;
  const bool no_trim = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;  // glibc's int: 1 GiB
  if (no_mmap && no_trim) return AllocatorPolicy::kRetained;
#endif
  return AllocatorPolicy::kUnavailable;
}

std::string to_string(AllocatorPolicy policy) {
  switch (policy) {
    case AllocatorPolicy::kRetained:
      return "freed tensor memory kept for reuse (glibc: no mmap blocks, no trimming)";
    case AllocatorPolicy::kLeftToEnvironment:
      return "malloc tuned by the environment's MALLOC_*_ variables";
    case AllocatorPolicy::kUnavailable:
      break;
  }
  return "malloc as it is (not glibc's: freed tensor memory may go back to the kernel)";
}

namespace {

// Smaller blocks are malloc's: it serves them from its bins without growing the heap.
constexpr size_t kMinCachedBytes = size_t(1) << 20;

// Faults in the pages of a block new to the cache in one call, rather than one fault per page
// during the step that first writes them. Kernels before 5.14 refuse (EINVAL); then the pages
// are faulted in as they are touched, as before.
void populate(void* data, size_t bytes) {
#if defined(MADV_POPULATE_WRITE)
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (uintptr_t(data) + page - 1) / page * page;
  const uintptr_t end = (uintptr_t(data) + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#else
  (void)data, (void)bytes;
#endif
}

size_t physical_memory_bytes() {
  return size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE));
}

// The cache's state, shared by every thread (the loader's batches are freed by the training
// thread) and never destroyed: tensors may outlive static destructors.
struct BlockCache {
  std::mutex mutex;
  std::unordered_map<void*, size_t> in_use;  // cached blocks handed out: address -> size
  std::multimap<size_t, void*> idle;         // cached blocks free for reuse, by size
  CpuTensorCacheStats stats;
  size_t max_idle_bytes = physical_memory_bytes() / 8;

  static BlockCache& get() {
    static auto* cache = new BlockCache;
    return *cache;
  }

  void* take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex);
    // The smallest idle block that fits and wastes at most half of itself.
    const auto fit = idle.lower_bound(bytes);
    if (fit != idle.end() && fit->first / 2 <= bytes) {
      void* data = fit->second;
      in_use.emplace(data, fit->first);
      stats.idle_bytes -= fit->first;
      idle.erase(fit);
      ++stats.hits;
      return data;
    }
    // No fit: a new size, or more blocks of one at once than before (the first steps, an
    // evaluation, an epoch's short last batch). Idle blocks stay, as the step that needs them
    // may come next; only past the limit (another model, sizes that never repeat) do they go
    // back to malloc, which can build this one from them. (Giving them back on every miss made the
    // reference Net's steps miss ~10 times each: each step handed the blocks that its later
    // allocations needed back to malloc.)
    if (stats.idle_bytes > max_idle_bytes) free_idle();
    void* data = c10::alloc_cpu(bytes);  // throws on failure, with LibTorch's message
    populate(data, bytes);
    in_use.emplace(data, bytes);
    stats.held_bytes += bytes;
    ++stats.misses;
    return data;
  }

  // Hands every idle block back to malloc; the caller holds the mutex.
  void free_idle() {
    for (const auto& [size, data] : idle) c10::free_cpu(data);
    stats.held_bytes -= stats.idle_bytes;
    stats.idle_bytes = 0;
    idle.clear();
  }

  // Whether `data` was a cached block (now idle); otherwise the caller frees it.
  bool give_back(void* data) {
    std::lock_guard<std::mutex> lock(mutex);
    const auto block = in_use.find(data);
    if (block == in_use.end()) return false;
    idle.emplace(block->second, data);
    stats.idle_bytes += block->second;
    in_use.erase(block);
    return true;
  }
};

void release(void* data) {
  if (data != nullptr && !BlockCache::get().give_back(data)) c10::free_cpu(data);
}

// A small block's tensor frees it straight to malloc, without the cache's lock. raw_deallocate()
// has one deleter for every block, raw_deleter(): release() looks the block up, and frees one it
// does not hold (the data pointer is the context, as raw_allocate() needs).
struct CpuTensorCache final : compat::CpuAllocatorBase {
  c10::DataPtr allocate_bytes(size_t bytes) const override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (bytes < kMinCachedBytes) {
      void* data = c10::alloc_cpu(bytes);
      return {data, data, &c10::free_cpu, cpu};
    }
    void* data = BlockCache::get().take(bytes);
    return {data, data, &release, cpu};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
};

}  // namespace

c10::Allocator* cpu_tensor_cache() {
  static auto* allocator = new CpuTensorCache;
  return allocator;
}

TensorCachePolicy cache_cpu_tensors(int local_processes) {
  if (const char* value = std::getenv(env::kCpuTensorCache); value != nullptr) {
    const std::string setting = value;
    if (setting == "0") return TensorCachePolicy::kTurnedOff;
    if (setting != "1") {
      throw Error(
          c10::str("environment variable ", env::kCpuTensorCache, " is '", setting,
                   "'; set it to 1 (cache large CPU tensor blocks, the default) or 0 (LibTorch's "
                   "allocator as it is), or unset it"));
    }
  }
#if defined(__SANITIZE_ADDRESS__)
  return TensorCachePolicy::kAddressSanitizer;
#else
  set_cpu_tensor_cache_limit(physical_memory_bytes() / 8 / size_t(std::max(1, local_processes)));
  c10::SetAllocator(c10::DeviceType::CPU, cpu_tensor_cache());
  return c10::GetAllocator(c10::DeviceType::CPU) == cpu_tensor_cache()
             ? TensorCachePolicy::kInstalled
             : TensorCachePolicy::kOtherAllocator;
#endif
}

std::string to_string(TensorCachePolicy policy) {
  switch (policy) {
    case TensorCachePolicy::kInstalled:
      return "CPU tensor blocks of 1 MiB and more cached for reuse";
    case TensorCachePolicy::kTurnedOff:
      return c10::str("CPU tensors not cached (", env::kCpuTensorCache, "=0)");
    case TensorCachePolicy::kAddressSanitizer:
      return "CPU tensors not cached (AddressSanitizer build)";
    case TensorCachePolicy::kOtherAllocator:
      break;
  }
  return "CPU tensors not cached (another CPU allocator is registered)";
}

void set_cpu_tensor_cache_limit(size_t max_idle_bytes) {
  BlockCache& cache = BlockCache::get();
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.max_idle_bytes = max_idle_bytes;
}

void empty_cpu_tensor_cache() {
  BlockCache& cache = BlockCache::get();
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.free_idle();
}

CpuTensorCacheStats cpu_tensor_cache_stats() {
  BlockCache& cache = BlockCache::get();
  std::lock_guard<std::mutex> lock(cache.mutex);
  CpuTensorCacheStats stats = cache.stats;
  stats.idle_limit_bytes = cache.max_idle_bytes;
  return stats;
}

}  // namespace ddp

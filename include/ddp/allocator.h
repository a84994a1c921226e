// Tensor memory that stays in the process between training steps. LibTorch's CPU allocator is
// plain posix_memalign, with no cache (1.13 and 2.x alike), and glibc serves large blocks with
// mmap and returns them to the kernel on free: every step's activations (16 MiB for the
// reference Net's first layer at batch 64) were then fresh pages, faulted in and zeroed by the
// kernel, which cost more than half of a step's time (docs/performance.md has the figures).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace c10 {
struct Allocator;
}

namespace ddp {

/// What retain_freed_memory() did.
enum class AllocatorPolicy {
  kRetained,           ///< glibc told to keep freed memory (no mmap blocks, no trimming)
  kLeftToEnvironment,  ///< a MALLOC_*_ tuning variable is set: the user's settings stand
  kUnavailable,        ///< not glibc's malloc (musl, or jemalloc/tcmalloc preloaded)
};

/// Makes glibc's malloc keep freed memory for reuse instead of handing it back to the kernel:
/// every block from the heap (M_MMAP_MAX 0), the heap never trimmed (M_TRIM_THRESHOLD). Like
/// PyTorch's CUDA caching allocator, the process then holds its peak tensor memory until it
/// exits. Call it first thing in main(), before large tensors exist. Leaves glibc alone when the
/// environment sets MALLOC_MMAP_MAX_, MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_.
AllocatorPolicy retain_freed_memory();

/// One line for the start-up banner: "freed tensor memory kept for reuse", or why not.
std::string to_string(AllocatorPolicy policy);

/// Counters of the CPU tensor cache (cache_cpu_tensors()), since the process started.
struct CpuTensorCacheStats {
  int64_t hits = 0;             ///< allocations served by an idle cached block
  int64_t misses = 0;           ///< allocations that went to malloc instead
  size_t held_bytes = 0;        ///< bytes in cached blocks now, in use or idle
  size_t idle_bytes = 0;        ///< of which idle, waiting for the next allocation of their size
  size_t idle_limit_bytes = 0;  ///< set_cpu_tensor_cache_limit()
};

/// LibTorch's CPU allocator with a cache of large blocks, like PyTorch's CUDA caching allocator:
/// a freed block of 1 MiB or more is kept and handed to the next allocation of its size (or of
/// at least half its size), so that a training step takes the very blocks the step before used.
/// Smaller blocks are LibTorch's as before (c10::alloc_cpu, c10::free_cpu).
/// - Why: without it, glibc places each step's blocks afresh among its free chunks; now and then
///   a step finds no chunk that fits, the heap grows by tens of MiB, and that step faults in
///   every new page, taking several times as long as a step; each rank hits it on a different
///   step, and ranks in step wait for every one of them.
/// - A block new to the cache has its pages faulted in at once (madvise MADV_POPULATE_WRITE,
///   Linux 5.14+): one call is much cheaper than faulting the same pages one by one.
/// - Memory: the cache holds, per size, as many blocks as were ever in use at once, across
///   phases (training and evaluation sizes both). Once idle blocks exceed
///   set_cpu_tensor_cache_limit() (see cache_cpu_tensors()), the next allocation that finds none
///   hands them all back to malloc first.
/// Returns the allocator, not installed; cache_cpu_tensors() installs it.
c10::Allocator* cpu_tensor_cache();

/// What cache_cpu_tensors() did.
enum class TensorCachePolicy {
  kInstalled,         ///< cpu_tensor_cache() is LibTorch's CPU allocator now
  kTurnedOff,         ///< DDP_CPU_TENSOR_CACHE=0 in the environment
  kAddressSanitizer,  ///< an AddressSanitizer build: a cache would blind its use-after-free checks
  kOtherAllocator,    ///< an allocator registered with a higher priority stays
};

/// Installs cpu_tensor_cache() as LibTorch's CPU allocator; call it first thing in main(), before
/// large tensors exist (tensors allocated before keep their own deleter). Its limit on idle
/// blocks is set so that those of `local_processes` processes (this machine's workers) stay
/// under an eighth of the machine's memory together. The environment variable
/// DDP_CPU_TENSOR_CACHE=0 turns it off (as PYTORCH_NO_CUDA_MEMORY_CACHING does PyTorch's CUDA
/// cache); any value other than 0 or 1 throws ddp::Error.
TensorCachePolicy cache_cpu_tensors(int local_processes = 1);

/// One line for the start-up banner.
std::string to_string(TensorCachePolicy policy);

/// Idle cached bytes above which a miss first hands every idle block back to malloc (an eighth
/// of the machine's memory until cache_cpu_tensors() or this sets it).
void set_cpu_tensor_cache_limit(size_t max_idle_bytes);

/// Hands every idle cached block back to malloc, as torch.cuda.empty_cache() does PyTorch's.
void empty_cpu_tensor_cache();

/// The cache's counters now.
CpuTensorCacheStats cpu_tensor_cache_stats();

}  // namespace ddp

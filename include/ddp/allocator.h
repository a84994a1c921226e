// Tensor memory that stays in the process between training steps. LibTorch's CPU allocator is
// plain posix_memalign, with no cache (1.13 and 2.x alike), and glibc serves large blocks with
// mmap and returns them to the kernel on free: every step's activations (16 MiB for the
// reference Net's first layer at batch 64) were then fresh pages, faulted in and zeroed by the
// kernel. Measured on the 2-vCPU machine: 376 against ~1,050 images/s on one thread.
#pragma once

#include <string>

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

}  // namespace ddp

#include "ddp/allocator.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ddp {

AllocatorPolicy retain_freed_memory() {
  for (const char* name :
       {"MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"}) {
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

}  // namespace ddp

// Placing a node's workers on its CPUs: the launcher's cpu_bind option (as Slurm's and Open
// MPI's binding to cores). Bound workers stop migrating between CPUs, and
// when workers outnumber CPUs each CPU carries the same number of them, so ranks in lock step
// finish their steps together instead of two sharing one CPU while another CPU waits
// (docs/performance.md).
#pragma once

#include <string>
#include <vector>

namespace ddp {

/// How the launcher places its workers on the node's CPUs.
enum class CpuBind {
  kNone,   ///< the kernel's scheduler places them (the default, as torchrun)
  kCores,  ///< each local rank runs only on its own share of the launcher's CPUs (cpu_share)
};

/// The CPUs this process may run on (its affinity mask, as taskset or a batch system set it),
/// in increasing order.
std::vector<int> allowed_cpus();

/// Local rank `local_rank`'s share of `cpus` among `nproc` workers: contiguous blocks of equal
/// size (one larger where they do not divide evenly); when workers outnumber CPUs, neighbouring
/// ranks share one CPU (4 workers on CPUs {0, 1}: 0, 0, 1, 1). Throws InvalidArgument when
/// `cpus` is empty or local_rank is not in [0, nproc).
std::vector<int> cpu_share(const std::vector<int>& cpus, int nproc, int local_rank);

/// In a worker: whether the launcher bound it to its share of the CPUs (CpuBind::kCores; it says
/// so in DDP_CPU_BIND). Then the CPUs this process may use are its own, not shared with other
/// workers of the node, and one thread per CPU of allowed_cpus() is its fair size.
bool launched_with_cpu_binding();

/// The list as taskset writes it: "0-3,8".
std::string cpu_list_text(const std::vector<int>& cpus);

}  // namespace ddp

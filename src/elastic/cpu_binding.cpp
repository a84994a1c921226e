#include "ddp/elastic/cpu_binding.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <c10/util/StringUtil.h>

#include "ddp/environment.h"
#include "ddp/error.h"

namespace ddp {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) {
    throw Error(c10::str("cannot read this process's CPU affinity: ", std::strerror(errno)));
  }
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

std::vector<int> cpu_share(const std::vector<int>& cpus, int nproc, int local_rank) {
  if (cpus.empty()) throw InvalidArgument("cpu_share: no CPUs to share");
  if (nproc < 1 || local_rank < 0 || local_rank >= nproc) {
    throw InvalidArgument(c10::str("cpu_share: local rank ", local_rank, " of ", nproc));
  }
  const auto n = int64_t(cpus.size());
  const int64_t begin = local_rank * n / nproc;
  const int64_t end = std::max(begin + 1, (local_rank + 1) * n / nproc);
  return {cpus.begin() + begin, cpus.begin() + end};
}

bool launched_with_cpu_binding() {
  // The launcher writes "cores", and clears an outside value: any value means it bound us.
  const char* bound = std::getenv(env::kCpuBind);
  return bound != nullptr && *bound != '\0';
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string text;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!text.empty()) text += ',';
    text += std::to_string(cpus[i]);
    if (j > i) text += c10::str("-", cpus[j]);
    i = j + 1;
  }
  return text;
}

}  // namespace ddp

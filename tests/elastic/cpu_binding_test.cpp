// The launcher's --cpu-bind cores: each local rank's share of the CPUs.
#include <gtest/gtest.h>

#include "ddp/elastic/cpu_binding.h"
#include "ddp/error.h"

namespace ddp {
namespace {

using Cpus = std::vector<int>;

std::vector<Cpus> shares(const Cpus& cpus, int nproc) {
  std::vector<Cpus> out;
  for (int r = 0; r < nproc; ++r) out.push_back(cpu_share(cpus, nproc, r));
  return out;
}

TEST(CpuBinding, WorkersOutnumberingCpusShareThemEvenlyInOrder) {
  EXPECT_EQ(shares({0, 1}, 4), (std::vector<Cpus>{{0}, {0}, {1}, {1}}));
  EXPECT_EQ(shares({0, 1}, 3), (std::vector<Cpus>{{0}, {0}, {1}}));
  EXPECT_EQ(shares({7}, 2), (std::vector<Cpus>{{7}, {7}}));
}

TEST(CpuBinding, CpusOutnumberingWorkersSplitIntoContiguousBlocks) {
  EXPECT_EQ(shares({0, 1, 2, 3, 4, 5, 6, 7}, 2), (std::vector<Cpus>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(shares({0, 1, 2, 3}, 3), (std::vector<Cpus>{{0}, {1}, {2, 3}}));
  EXPECT_EQ(shares({0, 1}, 1), (std::vector<Cpus>{{0, 1}}));
}

TEST(CpuBinding, SharesComeFromTheAllowedCpusOnly) {
  // A launcher started under `taskset -c 4,6,9,10`: its workers get those CPUs, not 0..3.
  EXPECT_EQ(shares({4, 6, 9, 10}, 2), (std::vector<Cpus>{{4, 6}, {9, 10}}));
}

TEST(CpuBinding, BadArgumentsAreRefused) {
  EXPECT_THROW(cpu_share({}, 2, 0), InvalidArgument);
  EXPECT_THROW(cpu_share({0, 1}, 2, 2), InvalidArgument);
  EXPECT_THROW(cpu_share({0, 1}, 0, 0), InvalidArgument);
}

TEST(CpuBinding, ListsAreWrittenAsTasksetWritesThem) {
  EXPECT_EQ(cpu_list_text({0, 1, 2, 3, 8}), "0-3,8");
  EXPECT_EQ(cpu_list_text({5}), "5");
  EXPECT_EQ(cpu_list_text({1, 3, 4}), "1,3-4");
  EXPECT_EQ(cpu_list_text({}), "");
}

TEST(CpuBinding, ThisProcessMayRunOnSomeCpus) {
  const Cpus cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  for (size_t i = 1; i < cpus.size(); ++i) EXPECT_LT(cpus[i - 1], cpus[i]);
}

}  // namespace
}  // namespace ddp

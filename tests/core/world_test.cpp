// Rank and world from torchrun's, Slurm's and Open MPI's environment variables.
#include <gtest/gtest.h>

#include "ddp/error.h"
#include "ddp/world.h"

namespace ddp {
namespace {

using Env = std::map<std::string, std::string>;

TEST(WorldInfo, NoLauncherIsOneProcess) {
  const WorldInfo w = WorldInfo::from_map({});
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.world_size, 1);
  EXPECT_EQ(w.source, "default");
}

TEST(WorldInfo, Torchrun) {
  const WorldInfo w = WorldInfo::from_map({{"RANK", "3"},
                                           {"WORLD_SIZE", "4"},
                                           {"LOCAL_RANK", "1"},
                                           {"LOCAL_WORLD_SIZE", "2"},
                                           {"GROUP_RANK", "1"},
                                           {"MASTER_ADDR", "10.1.2.3"},
                                           {"MASTER_PORT", "23456"},
                                           {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                           {"TORCHELASTIC_RESTART_COUNT", "2"}});
  EXPECT_EQ(w.source, "torchrun");
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.world_size, 4);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 2);
  EXPECT_EQ(w.group_rank, 1);
  EXPECT_EQ(w.master_addr, "10.1.2.3");
  EXPECT_EQ(w.master_port, 23456);
  EXPECT_TRUE(w.agent_store);
  EXPECT_EQ(w.restart_count, 2);
}

TEST(WorldInfo, Slurm) {
  const WorldInfo w = WorldInfo::from_map({{"SLURM_PROCID", "5"},
                                           {"SLURM_NTASKS", "8"},
                                           {"SLURM_LOCALID", "1"},
                                           {"SLURM_NODEID", "2"},
                                           {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                           {"SLURM_JOB_NODELIST", "gpu[03-05,9],cpu1"}});
  EXPECT_EQ(w.source, "slurm");
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 4);
  EXPECT_EQ(w.group_rank, 2);
  EXPECT_EQ(w.master_addr, "gpu03");
}

// Under Slurm without MASTER_ADDR/MASTER_PORT: the first host, and a port from the job's number
// (PyTorch Lightning's rule), so a plain `srun ddp-train ...` meets.
TEST(WorldInfo, SlurmDerivesTheMasterPortFromTheJobId) {
  const Env base = {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n[7-8]"}};
  Env env = base;
  env["SLURM_JOB_ID"] = "4321987";
  WorldInfo w = WorldInfo::from_map(env);
  EXPECT_EQ(w.master_addr, "n7");
  EXPECT_EQ(w.master_port, 15000 + 1987);
  EXPECT_TRUE(w.master_port_set);
  env["MASTER_PORT"] = "23456";  // the user's wins
  EXPECT_EQ(WorldInfo::from_map(env).master_port, 23456);
  EXPECT_FALSE(WorldInfo::from_map(base).master_port_set);  // no job id: nothing to derive
  env = base;
  env["SLURM_JOB_ID"] = "x12";
  EXPECT_THROW(WorldInfo::from_map(env), InvalidArgument);
}

TEST(WorldInfo, SlurmMasterAddrOverridesNodelist) {
  const WorldInfo w = WorldInfo::from_map({{"SLURM_PROCID", "0"},
                                           {"SLURM_NTASKS", "2"},
                                           {"SLURM_JOB_NODELIST", "n1,n2"},
                                           {"MASTER_ADDR", "head"}});
  EXPECT_EQ(w.master_addr, "head");
}

TEST(WorldInfo, OpenMpi) {
  const WorldInfo w = WorldInfo::from_map({{"OMPI_COMM_WORLD_RANK", "2"},
                                           {"OMPI_COMM_WORLD_SIZE", "3"},
                                           {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}});
  EXPECT_EQ(w.source, "openmpi");
  EXPECT_EQ(w.rank, 2);
  EXPECT_EQ(w.world_size, 3);
  EXPECT_EQ(w.group_rank, 2);  // one rank per node, placed node by node
}

TEST(WorldInfo, TorchrunWinsOverSlurm) {
  const WorldInfo w = WorldInfo::from_map(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(w.source, "torchrun");
}

TEST(WorldInfo, RejectsBadValues) {
  EXPECT_THROW(WorldInfo::from_map({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), InvalidArgument);
  EXPECT_THROW(WorldInfo::from_map({{"RANK", "x"}, {"WORLD_SIZE", "4"}}), InvalidArgument);
  EXPECT_THROW(WorldInfo::from_map({{"RANK", "0"}}), InvalidArgument);
  EXPECT_THROW(WorldInfo::from_map({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}),
               InvalidArgument);
  try {
    WorldInfo::from_map({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 4 is not below the world size 4"),
              std::string::npos);
  }
}

TEST(SlurmNodelist, FirstHost) {
  EXPECT_EQ(first_slurm_host("node01"), "node01");
  EXPECT_EQ(first_slurm_host("node[07-09]"), "node07");
  EXPECT_EQ(first_slurm_host("a[1,3],b2"), "a1");
  EXPECT_EQ(first_slurm_host("x1,y[2-3]"), "x1");
}

}  // namespace
}  // namespace ddp

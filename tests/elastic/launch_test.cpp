// The launcher: N workers from one command, torchrun compatibility, and the whole job ending
// quickly, with the failed rank named and no process left, when a worker dies or errs.
#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <c10/util/StringUtil.h>
#include <chrono>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "ddp/data/synthetic.h"
#include "ddp/elastic/cpu_binding.h"
#include "ddp/elastic/launch.h"
#include "ddp/error.h"
#include "support/process.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string ddprun_bin() { return DDPRUN_BIN; }

// Every live process whose environment holds `marker` (our workers carry a unique one).
std::vector<int> processes_with(const std::string& marker) {
  std::vector<int> pids;
  DIR* proc = ::opendir("/proc");
  while (dirent* e = ::readdir(proc)) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == ::getpid()) continue;
    const std::string env = test::read_file("/proc/" + std::string(e->d_name) + "/environ");
    const std::string stat = test::read_file("/proc/" + std::string(e->d_name) + "/stat");
    const bool zombie = stat.find(") Z ") != std::string::npos;
    if (!zombie && env.find(marker) != std::string::npos) pids.push_back(pid);
  }
  ::closedir(proc);
  return pids;
}

// The pid of the worker with RANK=rank among processes carrying `marker`.
int worker_pid(const std::string& marker, int rank) {
  for (int pid : processes_with(marker)) {
    const std::string env = test::read_file("/proc/" + std::to_string(pid) + "/environ");
    if (env.find(std::string("\0RANK=", 6) + std::to_string(rank) + '\0') != std::string::npos)
      return pid;
  }
  return -1;
}

// Polls `condition` until it holds or `limit` passes (a bounded wait on an outside event).
bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return condition();
}

class LaunchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new test::TempDir();
    data::write_synthetic_cifar10(data_->path(), data::SyntheticOptions(4000, 200).seed(0));
  }
  static void TearDownTestSuite() { delete data_; }
  std::string marker() const {
    return "DDP_TEST_MARKER=" +
           std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
           std::to_string(::getpid());
  }
  std::map<std::string, std::string> marked_env() const {
    const std::string m = marker();
    return {{m.substr(0, m.find('=')), m.substr(m.find('=') + 1)}};
  }
  // A 50-epoch training job of 2 workers under ddprun, once it is past step 2 (null if never).
  std::unique_ptr<test::Child> start_long_training(const test::TempDir& out) const {
    auto job = std::make_unique<test::Child>(
        std::vector<std::string>{ddprun_bin(), "--nproc-per-node", "2", "--", test::train_bin(),
                                 "--data-dir", data_->path(), "--epochs", "50", "--log-every", "1",
                                 "--metrics", out / "m.jsonl"},
        marked_env());
    const bool started = wait_until(
        [&] { return test::read_file(out / "m.jsonl").find("\"step\": 2,") != std::string::npos; },
        120s);
    return started ? std::move(job) : nullptr;
  }
  static test::TempDir* data_;
};
test::TempDir* LaunchTest::data_ = nullptr;

TEST_F(LaunchTest, NprocPerNodeTrainsFromOneCommand) {
  const auto r = test::run({test::train_bin(), "--nproc-per-node", "4", "--data-dir", data_->path(),
                            "--epochs", "1", "--max-steps", "4"},
                           {}, 180s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 0] ddp-train: world size 4 (torchrun)"), std::string::npos)
      << r.output;
  std::set<std::string> fingerprints;
  std::smatch m;
  std::string rest = r.output;
  const std::regex re("\\[rank (\\d)\\] rank \\d: final weights fingerprint ([0-9a-f]+)");
  while (std::regex_search(rest, m, re)) {
    fingerprints.insert(m[2]);
    rest = m.suffix();
  }
  EXPECT_EQ(fingerprints.size(), 1u) << r.output;  // all four ranks agree
  EXPECT_NE(r.output.find("[rank 3] rank 3: final weights fingerprint"), std::string::npos)
      << r.output;
}

// ddp-train --cpu-bind cores hands the flag to its launcher; each worker then takes one thread per
// CPU of its share. Under another launcher the flag is said to do nothing.
TEST_F(LaunchTest, TrainerCpuBindSizesEachWorkersThreadsToItsShare) {
  const auto r = test::run({test::train_bin(), "--nproc-per-node", "2", "--cpu-bind", "cores",
                            "--data-dir", data_->path(), "--epochs", "1", "--max-steps", "2"},
                           {}, 180s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t share = cpu_share(allowed_cpus(), 2, 0).size();
  EXPECT_NE(r.output.find(c10::str(share, " intra-op thread(s) per worker (its ", share,
                                   " CPU(s), --cpu-bind cores)")),
            std::string::npos)
      << r.output;
  const auto outside =
      test::run({ddprun_bin(), "--nproc-per-node", "2", "--", test::train_bin(), "--cpu-bind",
                 "cores", "--data-dir", data_->path(), "--epochs", "1", "--max-steps", "2"},
                {}, 180s);
  ASSERT_EQ(outside.exit_code, 0) << outside.output;
  EXPECT_NE(outside.output.find("--cpu-bind ignored: started by a launcher (torchrun)"),
            std::string::npos)
      << outside.output;
}

TEST_F(LaunchTest, RunsUnderPythonsTorchrun) {
  // Debian's torch 1.13 torchrun crashes on Python 3.11 with the default --redirects/--tee 0
  // (IntFlag iteration skips NONE); any non-zero value avoids it. tests/python/torchrun.py is
  // `python3 -m torch.distributed.run` with a workaround for Debian 13's torch built without libuv.
  const auto r = test::run({DDP_PYTHON,
                            test::source_dir() + "/tests/python/torchrun.py",
                            "--nproc_per_node",
                            "2",
                            "--nnodes",
                            "1",
                            "--master_addr",
                            "127.0.0.1",
                            "--master_port",
                            std::to_string(test::free_port()),
                            "--redirects",
                            "1",
                            "--tee",
                            "1",
                            "--no_python",
                            test::train_bin(),
                            "--data-dir",
                            data_->path(),
                            "--epochs",
                            "1",
                            "--max-steps",
                            "3"},
                           {}, 180s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("world size 2 (torchrun)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(200 images)"), std::string::npos) << r.output;
}

TEST_F(LaunchTest, SigkilledWorkerEndsTheJobNamingItAndLeavesNothing) {
  test::TempDir out;
  test::Child launcher({test::train_bin(), "--nproc-per-node", "2", "--data-dir", data_->path(),
                        "--epochs", "50", "--log-every", "1", "--metrics", out / "m.jsonl"},
                       marked_env());
  ASSERT_TRUE(wait_until(
      [&] { return test::read_file(out / "m.jsonl").find("\"step\": 3,") != std::string::npos; },
      120s))
      << "training never started";
  const int victim = worker_pid(marker(), 1);
  ASSERT_GT(victim, 0);
  const auto killed_at = Clock::now();
  ::kill(victim, SIGKILL);
  const auto r = launcher.wait(30s);
  EXPECT_LT(Clock::now() - killed_at, 10s);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("rank 1 (local rank 1, pid " + std::to_string(victim) +
                          ") was killed by SIGKILL"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(processes_with(marker()).empty());
}

// A SIGSTOPped worker: its peers' collectives time out, and the launcher names it as frozen,
// not as dead, before it stops everyone (SIGKILL ends a stopped process too).
TEST_F(LaunchTest, AFrozenWorkerIsNamedAsFrozen) {
  test::TempDir out;
  test::Child launcher(
      {test::train_bin(), "--nproc-per-node", "2", "--data-dir", data_->path(), "--epochs", "50",
       "--log-every", "1", "--timeout", "5", "--metrics", out / "m.jsonl"},
      marked_env());
  ASSERT_TRUE(wait_until(
      [&] { return test::read_file(out / "m.jsonl").find("\"step\": 3,") != std::string::npos; },
      120s))
      << "training never started";
  const int frozen = worker_pid(marker(), 1);
  ASSERT_GT(frozen, 0);
  ::kill(frozen, SIGSTOP);
  const auto r = launcher.wait(60s);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("rank 1 (local rank 1, pid " + std::to_string(frozen) +
                          ") is frozen, not dead"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(processes_with(marker()).empty());
}

TEST_F(LaunchTest, WorkerErrorIsReportedWithItsMessage) {
  const auto r = test::run({ddprun_bin(), "--nproc-per-node", "2", "--", test::train_bin(),
                            "--data-dir", "/nonexistent/data"},
                           {}, 60s);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(") exited with code 1; stopped the other workers"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("    ddp-train (rank"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/data/data_batch_1.bin"), std::string::npos) << r.output;
}

TEST_F(LaunchTest, SigtermToTheLauncherStopsEveryWorker) {
  test::TempDir out;
  auto job = start_long_training(out);
  ASSERT_TRUE(job) << "training never started";
  test::Child& launcher = *job;
  ::kill(launcher.pid(), SIGTERM);
  const auto r = launcher.wait(30s);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.output;
  EXPECT_NE(r.output.find("received SIGTERM, stopping all workers"), std::string::npos) << r.output;
  EXPECT_TRUE(processes_with(marker()).empty());
}

// A rank that exits with kExitPeerFailure only saw another fail: the launcher names the rank that
// failed for its own reason, even when that one exits a moment later.
TEST_F(LaunchTest, NamesTheCauseNotTheRankThatLostItsPeer) {
  const std::string symptom = std::to_string(kExitPeerFailure);
  const auto r = test::run({ddprun_bin(), "--nproc-per-node", "2", "--", "/bin/sh", "-c",
                            "if [ $RANK = 0 ]; then echo lost peer >&2; exit " + symptom +
                                "; fi; sleep 0.3; echo the real error >&2; exit 4"},
                           {}, 60s);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("rank 1 (local rank 1, pid "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(") exited with code 4; stopped the other workers"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("last stderr lines of rank 1:\n    the real error"), std::string::npos)
      << r.output;
}

// When no other rank of the node fails (a hung peer, or a peer on another node), the rank that
// lost its peer is named after a second, and says so; the hung one, deaf to SIGTERM, is killed
// after the grace period.
TEST_F(LaunchTest, NamesThePeerFailureWhenNoCauseExitsAndKillsTheHungRank) {
  const std::string symptom = std::to_string(kExitPeerFailure);
  const auto start = std::chrono::steady_clock::now();
  const auto r =
      test::run({ddprun_bin(), "--nproc-per-node", "2", "--grace", "1", "--", "/bin/sh", "-c",
                 "if [ $RANK = 0 ]; then exit " + symptom + "; fi; trap '' TERM; sleep 60"},
                {}, 60s);
  EXPECT_FALSE(r.timed_out);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("rank 0 (local rank 0, pid "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exited with code " + symptom + " (it lost a peer"), std::string::npos)
      << r.output;
}

TEST_F(LaunchTest, MaxRestartsRestartsTheGroupWithTheCountInTheEnvironment) {
  const auto r = test::run(
      {ddprun_bin(), "--nproc-per-node", "2", "--max-restarts", "2", "--", "/bin/sh", "-c",
       "echo restart=$TORCHELASTIC_RESTART_COUNT; [ $TORCHELASTIC_RESTART_COUNT -ge 1 ] || exit 3"},
      {}, 60s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("exited with code 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("restarting the workers (restart 1 of 2)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[rank 1] restart=1"), std::string::npos) << r.output;
}

TEST_F(LaunchTest, EnvironmentLogDirAndRankZeroOnlyConsole) {
  test::TempDir logs;
  const auto r =
      test::run({ddprun_bin(), "--nproc-per-node", "3", "--log-dir", logs.path(), "--rank0-only",
                 "--", "/bin/sh", "-c",
                 "echo R=$RANK W=$WORLD_SIZE L=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE G=$GROUP_RANK "
                 "A=$MASTER_ADDR P=$MASTER_PORT"},
                {}, 60s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 0] R=0 W=3 L=0 LW=3 G=0 A=127.0.0.1 P="), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("[rank 1]"), std::string::npos) << r.output;
  EXPECT_NE(test::read_file(logs / "rank_2.log").find("R=2 W=3 L=2 LW=3 G=0"), std::string::npos);
}

// Local addresses ("0100007F:1F90" style, as /proc/net/tcp writes them) of every listening TCP
// socket that process `pid` holds.
std::vector<std::string> listening_addresses(int pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = ::opendir(fd_dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      char target[256] = {0};
      const std::string link = fd_dir + "/" + e->d_name;
      if (::readlink(link.c_str(), target, sizeof target - 1) > 0) {
        const std::string t(target);
        if (t.rfind("socket:[", 0) == 0) inodes.insert(t.substr(8, t.size() - 9));
      }
    }
    ::closedir(d);
  }
  std::vector<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream lines(test::read_file(table));
    std::string line;
    std::getline(lines, line);  // header
    while (std::getline(lines, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state == "0A" && inodes.count(inode)) out.push_back(local);
    }
  }
  return out;
}

TEST_F(LaunchTest, OneNodeJobListensOnLoopbackOnly) {
  test::TempDir out;
  auto job = start_long_training(out);
  ASSERT_TRUE(job) << "training never started";
  test::Child& launcher = *job;
  for (int pid : processes_with(marker())) {
    for (const std::string& local : listening_addresses(pid)) {
      // IPv4 127.0.0.1 is 0100007F; IPv6 ::1 is 00000000000000000000000001000000.
      const std::string host = local.substr(0, local.find(':'));
      EXPECT_TRUE(host == "0100007F" || host == "00000000000000000000000001000000")
          << "pid " << pid << " listens on " << local;
    }
  }
  ::kill(launcher.pid(), SIGTERM);
  launcher.wait(30s);
}

TEST_F(LaunchTest, MaxRestartsResumesFromTheLatestCheckpoint) {
  test::TempDir dir;
  const std::vector<std::string> job = {test::train_bin(), "--data-dir", data_->path(),
                                        "--max-steps",     "5",          "--no-eval"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = job;
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
  const auto whole = test::run(with({"--epochs", "3", "--nproc-per-node", "2"}), {}, 180s);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  // The first attempt trains one epoch, checkpoints, then fails; the restart must pick up there.
  std::string script = "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then ";
  for (const auto& a : job) script += "'" + a + "' ";
  script += "--epochs 1 --checkpoint-dir '" + dir / "ck" + "' >/dev/null && exit 9; fi; exec ";
  for (const auto& a : job) script += "'" + a + "' ";
  script += "--epochs 3 --checkpoint-dir '" + dir / "ck" + "'";
  const auto r = test::run({ddprun_bin(), "--nproc-per-node", "2", "--max-restarts", "1",
                            "--rank0-only", "--", "/bin/sh", "-c", script},
                           {}, 240s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("exited with code 9"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  ASSERT_FALSE(test::weight_fingerprints(whole.output).empty());
  ASSERT_FALSE(test::weight_fingerprints(r.output).empty()) << r.output;
  EXPECT_EQ(test::weight_fingerprints(r.output), test::weight_fingerprints(whole.output));
}

TEST_F(LaunchTest, SoakEightWorkersHundredsOfStepsWithoutMemoryGrowth) {
  test::TempDir out;
  const auto r = test::run({test::train_bin(), "--nproc-per-node", "8", "--data-dir", data_->path(),
                            "--epochs", "3", "--batch-size", "4", "--max-steps", "120", "--no-eval",
                            "--metrics", out / "m.jsonl", "--log-every", "1000"},
                           marked_env(), 300s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<double> rss;
  std::istringstream lines(test::read_file(out / "m.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, std::regex("\"peak_rss_mb\": ([0-9.]+)")))
      rss.push_back(std::stod(m[1]));
  }
  ASSERT_EQ(rss.size(), 3u);
  // 360 steps on 8 ranks: the peak after the first epoch barely moves.
  EXPECT_LT(rss[2], rss[0] * 1.05 + 8) << rss[0] << " -> " << rss[2];
  EXPECT_TRUE(processes_with(marker()).empty());
}

TEST_F(LaunchTest, TwentyJobsBackToBackLeaveNothingBehind) {
  test::TempDir tmp;  // the launcher's rendezvous directories go here
  auto env = marked_env();
  env["TMPDIR"] = tmp.path();
  for (int job = 0; job < 20; ++job) {
    const auto r = test::run({ddprun_bin(), "--nproc-per-node", "2", "--", EXAMPLE_BIN}, env, 60s);
    ASSERT_EQ(r.exit_code, 0) << "job " << job << ": " << r.output;
    ASSERT_TRUE(processes_with(marker()).empty()) << "job " << job;
  }
  EXPECT_EQ(test::run({"/bin/ls", "-A", tmp.path()}).output, "");  // no file left behind
}

// --cpu-bind cores: each worker runs only on its local rank's share of the launcher's CPUs and
// is told so; without it every worker may run anywhere.
TEST_F(LaunchTest, CpuBindCoresGivesEachLocalRankItsShareOfTheCpus) {
  const std::string report =
      "echo rank $LOCAL_RANK bind=$DDP_CPU_BIND $(grep Cpus_allowed_list "
      "/proc/self/status | tr -d '[:space:]')";
  const auto bound = test::run(
      {ddprun_bin(), "--nproc-per-node", "4", "--cpu-bind", "cores", "--", "/bin/sh", "-c", report},
      {}, 60s);
  ASSERT_EQ(bound.exit_code, 0) << bound.output;
  const std::vector<int> cpus = allowed_cpus();
  std::string listed;
  for (int r = 0; r < 4; ++r) {
    const std::string share = cpu_list_text(cpu_share(cpus, 4, r));
    EXPECT_NE(
        bound.output.find(c10::str("rank ", r, " bind=cores Cpus_allowed_list:", share, "\n")),
        std::string::npos)
        << "rank " << r << " should run on " << share << ":\n"
        << bound.output;
    listed += c10::str(r == 0 ? "" : ", ", r, ": ", share);
  }
  EXPECT_NE(bound.output.find("CPUs of each local rank (cpu_bind cores): " + listed),
            std::string::npos)
      << bound.output;

  const auto free =
      test::run({ddprun_bin(), "--nproc-per-node", "2", "--", "/bin/sh", "-c", report},
                {{"DDP_CPU_BIND", "cores"}}, 60s);  // not inherited from outside
  ASSERT_EQ(free.exit_code, 0) << free.output;
  EXPECT_NE(free.output.find("rank 1 bind= Cpus_allowed_list:" + cpu_list_text(cpus)),
            std::string::npos)
      << free.output;
  const auto bad = test::run({ddprun_bin(), "--cpu-bind", "numa", "--", "/bin/true"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("--cpu-bind: unknown CPU binding 'numa'; use none or cores"),
            std::string::npos)
      << bad.output;
}

TEST_F(LaunchTest, BadFlagsAreClearErrors) {
  const auto none = test::run({ddprun_bin(), "--nproc-per-node", "2"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.output.find("no program to run"), std::string::npos) << none.output;
  const auto nodes =
      test::run({ddprun_bin(), "--nnodes", "2", "--node-rank", "2", "--", "/bin/true"});
  EXPECT_EQ(nodes.exit_code, 2);
  EXPECT_NE(nodes.output.find("node_rank 2 is not in [0, nnodes) = [0, 2)"), std::string::npos)
      << nodes.output;
  const auto port =
      test::run({ddprun_bin(), "--nnodes", "2", "--master-addr", "hostx", "--", "/bin/true"});
  EXPECT_EQ(port.exit_code, 2);
  EXPECT_NE(port.output.find("master_port is required with nnodes > 1"), std::string::npos)
      << port.output;
  // Every value is checked, and torchrun's spellings work.
  const auto grace = test::run({ddprun_bin(), "--grace", "soon", "--", "/bin/true"});
  EXPECT_EQ(grace.exit_code, 2);
  EXPECT_NE(grace.output.find("--grace: 'soon' is not a number in [0, 3600]"), std::string::npos)
      << grace.output;
  const auto unknown = test::run({ddprun_bin(), "--nprocs", "2", "--", "/bin/true"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("unknown argument '--nprocs'; see ddprun --help"),
            std::string::npos)
      << unknown.output;
  const auto torchrun = test::run({ddprun_bin(), "--nproc_per_node=2", "--max_restarts", "0",
                                   "/bin/sh", "-c", "echo rank $RANK of $WORLD_SIZE"});
  EXPECT_EQ(torchrun.exit_code, 0) << torchrun.output;
  EXPECT_NE(torchrun.output.find("rank 1 of 2"), std::string::npos) << torchrun.output;
}

// The launcher in this process, failing after it has taken the signals, made its directory and
// started a worker: everything is given back.

// This process's children, zombies included (a child killed but not reaped is still one).
std::set<int> children() {
  std::set<int> pids;
  DIR* proc = ::opendir("/proc");
  while (dirent* e = ::readdir(proc)) {
    if (std::atoi(e->d_name) <= 0) continue;
    // "PID (COMM) STATE PPID ...": COMM may hold spaces and ')', so read after the last ')'.
    const std::string stat = test::read_file("/proc/" + std::string(e->d_name) + "/stat");
    const size_t comm_end = stat.rfind(')');
    if (comm_end == std::string::npos) continue;  // gone meanwhile
    std::istringstream fields(stat.substr(comm_end + 1));
    std::string state;
    int ppid = 0;
    fields >> state >> ppid;
    if (ppid == ::getpid()) pids.insert(std::atoi(e->d_name));
  }
  ::closedir(proc);
  return pids;
}

std::vector<std::string> directory_entries(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(path.c_str());
  while (dirent* e = dir ? ::readdir(dir) : nullptr) {
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.push_back(e->d_name);
  }
  if (dir) ::closedir(dir);
  return names;
}

void note_signal(int) {}

// Handlers of this test's own on SIGINT and SIGTERM (so that the launcher's cannot pass for the
// ones found), and the process's original ones back at the end.
class TestSignalHandlers {
 public:
  TestSignalHandlers() {
    struct sigaction ours {};
    ours.sa_handler = note_signal;
    sigemptyset(&ours.sa_mask);
    ::sigaction(SIGINT, &ours, &original_int_);
    ::sigaction(SIGTERM, &ours, &original_term_);
  }
  ~TestSignalHandlers() {
    ::sigaction(SIGINT, &original_int_, nullptr);
    ::sigaction(SIGTERM, &original_term_, nullptr);
  }
  static bool installed(int sig) {
    struct sigaction now {};
    ::sigaction(sig, nullptr, &now);
    return now.sa_handler == note_signal;
  }

 private:
  struct sigaction original_int_ {};
  struct sigaction original_term_ {};
};

// An environment variable of this process set (or, with nullptr, unset) until the scope ends.
class ScopedVariable {
 public:
  ScopedVariable(std::string name, const char* value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    value ? ::setenv(name_.c_str(), value, 1) : ::unsetenv(name_.c_str());
  }
  ~ScopedVariable() {
    old_ ? ::setenv(name_.c_str(), old_->c_str(), 1) : ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// A log file that cannot be opened (rank 1's name is a directory's) fails the start after rank 0
// runs: a mistake a user can make, and the latest point of the start at which launch() throws.
TEST(LaunchFailure, StartErrorLeavesNoHandlerFileOrProcess) {
  test::TempDir tmp, logs;
  ASSERT_EQ(::mkdir((logs / "rank_1.log").c_str(), 0755), 0);
  const ScopedVariable tmpdir("TMPDIR", tmp.path().c_str());
  const TestSignalHandlers handlers;
  const std::set<int> before = children();
  const auto options = LaunchOptions()
                           .nproc_per_node(2)
                           .log_dir(logs.path())
                           .grace_seconds(30)  // not waited out: an error kills at once
                           .command({"/bin/sleep", "60"});
  std::string error;
  try {
    launch(options);
  } catch (const IoError& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "log_dir: cannot write " + (logs / "rank_1.log"));
  EXPECT_EQ(::access((logs / "rank_0.log").c_str(), F_OK), 0);  // rank 0 was started first
  EXPECT_TRUE(TestSignalHandlers::installed(SIGINT));
  EXPECT_TRUE(TestSignalHandlers::installed(SIGTERM));
  EXPECT_EQ(directory_entries(tmp.path()), std::vector<std::string>{});
  const std::set<int> after = children();
  EXPECT_EQ(after, before);
  for (int pid : after) {  // what a regression left is not left to the next tests
    if (before.count(pid) == 0 && ::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
  }
}

// The library names its own option; a program adds its usage (ddprun: BadFlagsAreClearErrors).
TEST(LaunchFailure, AnEmptyCommandIsNamedAsTheOption) {
  std::string error;
  try {
    launch(LaunchOptions().nproc_per_node(2));
  } catch (const InvalidArgument& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "command is empty: no program to run");
}

// What a worker reads of what its launcher told it (the variables' names are an interface:
// scripts and other launchers set them too).
TEST(LaunchEnvironment, WorkersReadTheLaunchersVariables) {
  {
    const ScopedVariable bind("DDP_CPU_BIND", nullptr), tty("DDP_STDOUT_TTY", nullptr);
    EXPECT_FALSE(launched_with_cpu_binding());
    EXPECT_EQ(launcher_stdout_is_terminal(), std::nullopt);
  }
  {
    const ScopedVariable bind("DDP_CPU_BIND", ""), tty("DDP_STDOUT_TTY", "");
    EXPECT_FALSE(launched_with_cpu_binding());
    EXPECT_EQ(launcher_stdout_is_terminal(), std::nullopt);
  }
  {
    const ScopedVariable bind("DDP_CPU_BIND", "cores"), tty("DDP_STDOUT_TTY", "1");
    EXPECT_TRUE(launched_with_cpu_binding());
    EXPECT_EQ(launcher_stdout_is_terminal(), std::optional<bool>(true));
  }
  const ScopedVariable tty("DDP_STDOUT_TTY", "0");
  EXPECT_EQ(launcher_stdout_is_terminal(), std::optional<bool>(false));
}

}  // namespace
}  // namespace ddp

// The launcher's elastic rendezvous (ddprun --rdzv-backend c10d) with several agents on this
// machine and a loopback endpoint, as torchrun allows for trying it out: bad options, a minimum
// never reached, two jobs on one endpoint, and what a worker failure costs. The multi-node
// scenarios (a node killed, cut off, frozen, added, restarted) are in elastic_netns.sh.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "support/process.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string ddprun_bin() { return DDPRUN_BIN; }

// One node's agent of job `id` at 127.0.0.1:`port`, its workers running `command`.
std::vector<std::string> agent(int port, const std::string& id, const std::string& nnodes,
                               std::vector<std::string> command,
                               const std::string& conf = "last_call_timeout=1") {
  std::vector<std::string> argv = {ddprun_bin(),
                                   "--nnodes",
                                   nnodes,
                                   "--rdzv-backend",
                                   "c10d",
                                   "--rdzv-endpoint",
                                   "127.0.0.1:" + std::to_string(port),
                                   "--rdzv-id",
                                   id,
                                   "--rdzv-conf",
                                   conf + ",keep_alive_interval=1"};
  argv.push_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

TEST(ElasticLaunchTest, BadMembershipFlagsAreNamed) {
  const std::vector<std::string> run = {"--", "/bin/true"};
  struct Case {
    std::vector<std::string> flags;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--nnodes", "3:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:1"},
       "MIN 3 is more than MAX 2"},
      {{"--nnodes", "2:x"}, "--nnodes (MAX)"},
      {{"--nnodes", "1:2"}, "needs the rdzv_backend c10d"},
      {{"--rdzv-backend", "etcd"}, "use static or c10d"},
      {{"--rdzv-backend", "c10d"}, "needs rdzv_endpoint HOST:PORT"},
      {{"--rdzv-backend", "c10d", "--rdzv-endpoint", "h:99999"}, "not a number in [1, 65535]"},
      {{"--rdzv-conf", "timeout=3"}, "unknown key 'timeout'"},
      {{"--rdzv-conf", "keep_alive_interval=0"}, "keep_alive_interval"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {ddprun_bin()};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    argv.insert(argv.end(), run.begin(), run.end());
    const auto r = test::run(argv, {}, 30s);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.message << "\n" << r.output;
  }
}

TEST(ElasticLaunchTest, AMinimumNeverReachedFailsAtTheJoinTimeoutNamingTheNodesPresent) {
  const int port = test::free_port();
  const auto start = Clock::now();
  const auto r = test::run(agent(port, "lonely", "2:3", {"/bin/true"}, "join_timeout=3"), {}, 60s);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_GE(seconds, 3.0);
  EXPECT_LT(seconds, 30.0);
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex("did not form within 3 s: 1 node\\(s\\) present of min 2 \\(max 3\\): "
                           "[^ ]+:[0-9]+")))
      << r.output;
}

TEST(ElasticLaunchTest, JobsWithOtherIdsOnOneEndpointDoNotMix) {
  const int port = test::free_port();
  const test::TempDir data;
  ASSERT_EQ(test::run({test::train_bin(), "make-data", "--out", data.path(), "--train", "256",
                       "--test", "64"})
                .exit_code,
            0);
  const std::vector<std::string> train = {
      test::train_bin(), "--data-dir", data.path(), "--epochs", "1",
      "--max-steps",     "2",          "--no-eval"};
  std::vector<std::unique_ptr<test::Child>> agents;
  for (const char* id : {"job-a", "job-b", "job-a", "job-b"}) {
    agents.push_back(std::make_unique<test::Child>(agent(port, id, "2", train),
                                                   std::map<std::string, std::string>{}));
  }
  std::set<std::string> prints[2];
  for (size_t i = 0; i < agents.size(); ++i) {
    const auto r = agents[i]->wait(120s);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("round 1: 2 node(s), world size 2"), std::string::npos) << r.output;
    for (const std::string& f : test::weight_fingerprints(r.output)) prints[i % 2].insert(f);
  }
  EXPECT_EQ(prints[0].size(), 1u);  // each job's two ranks agree
  EXPECT_EQ(prints[1].size(), 1u);
}

// Three nodes for a job of at most two: the third waits as a spare instead of making the round
// start over and over, and ends with the job.
TEST(ElasticLaunchTest, ANodeArrivingAtAFullRoundWaitsAsASpare) {
  const int port = test::free_port();
  const std::vector<std::string> argv =
      agent(port, "full", "2:2", {"/bin/sh", "-c", "sleep 3; echo done"});
  std::vector<std::unique_ptr<test::Child>> agents;
  for (int i = 0; i < 3; ++i) {
    agents.push_back(std::make_unique<test::Child>(argv, std::map<std::string, std::string>{}));
  }
  std::string all;
  for (auto& a : agents) {
    const auto r = a->wait(60s);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    all += r.output;
  }
  EXPECT_EQ(all.find("round 2"), std::string::npos) << all;
  const size_t spare = all.find("the job finished without this node");
  EXPECT_NE(spare, std::string::npos) << all;
  EXPECT_EQ(all.find("the job finished without this node", spare + 1), std::string::npos) << all;
}

// A worker that fails for its own reason uses up a restart: with one left the job goes on in a
// new round; with none the job ends on every node, the cause named.
TEST(ElasticLaunchTest, AWorkerFailureUsesARestartAndEndsTheJobEverywhereWhenNoneAreLeft) {
  // Node 1's worker fails in the first round only.
  const std::string script =
      "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$GROUP_RANK\" = 1 ]; then exit 3; fi; "
      "echo \"world $WORLD_SIZE rank $RANK\"";
  for (const int restarts : {1, 0}) {
    const int port = test::free_port();
    std::vector<std::string> argv = agent(port, "flaky", "2", {"/bin/sh", "-c", script});
    argv.insert(argv.begin() + 1, {"--max-restarts", std::to_string(restarts)});
    test::Child a(argv, {}), b(argv, {});
    const auto ra = a.wait(60s), rb = b.wait(60s);
    const std::string both = ra.output + rb.output;
    if (restarts == 1) {
      EXPECT_EQ(ra.exit_code, 0) << both;
      EXPECT_EQ(rb.exit_code, 0) << both;
      EXPECT_NE(both.find("restarting the workers in a new round (restart 1 of 1)"),
                std::string::npos)
          << both;
      EXPECT_NE(both.find("round 2: 2 node(s), world size 2"), std::string::npos) << both;
    } else {
      EXPECT_EQ(ra.exit_code, 1) << both;
      EXPECT_EQ(rb.exit_code, 1) << both;
      EXPECT_NE(both.find("rank 1 exited with code 3; no restarts left (0)"), std::string::npos)
          << both;
    }
  }
}

}  // namespace
}  // namespace ddp

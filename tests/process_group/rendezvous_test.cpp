// The rendezvous as a user meets it: a worker whose master never comes says every few seconds
// what it waits for and fails at --rendezvous-timeout with one line (no c10d stack trace); rank 0
// names the ranks present and missing; two workers given only Slurm's variables meet on the
// master Slurm's variables imply.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

#include "support/process.h"
#include "support/trainer_fixture.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

class RendezvousTest : public TrainerTest {
 protected:
  std::vector<std::string> train(std::vector<std::string> extra) const {
    std::vector<std::string> argv = {
        test::train_bin(), "--data-dir", data_->path(), "--epochs", "1",
        "--max-steps",     "3",          "--no-eval"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
};

TEST_F(RendezvousTest, AWorkerWhoseMasterNeverComesSaysWhatItWaitsForThenFailsInOneLine) {
  const int port = test::free_port();  // nobody listens there
  const auto start = std::chrono::steady_clock::now();
  const auto r = test::run(train({"--rendezvous-timeout", "7"}),
                           {{"RANK", "1"},
                            {"WORLD_SIZE", "2"},
                            {"LOCAL_RANK", "0"},
                            {"MASTER_ADDR", "127.0.0.1"},
                            {"MASTER_PORT", std::to_string(port)}},
                           60s);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(seconds, 20) << r.output;
  const std::string address = "127.0.0.1:" + std::to_string(port);
  EXPECT_NE(r.output.find("waiting for the rendezvous store at " + address), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("the rendezvous store at " + address + " did not answer within 7 s"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("Exception raised from"), std::string::npos) << r.output;  // c10's
}

TEST_F(RendezvousTest, RankZeroNamesTheRanksPresentAndMissing) {
  const auto r = test::run(train({"--rendezvous-timeout", "6"}),
                           {{"RANK", "0"},
                            {"WORLD_SIZE", "3"},
                            {"LOCAL_RANK", "0"},
                            {"MASTER_ADDR", "127.0.0.1"},
                            {"MASTER_PORT", std::to_string(test::free_port())}},
                           60s);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rendezvous: 1 of 3 ranks present, waiting for rank(s) 1, 2"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("waiting for rank(s) 1, 2 of world size 3"), std::string::npos)
      << r.output;
}

// A port in Lightning's range for Slurm jobs (15000 + the job id's last 4 digits) that is free.
int free_slurm_port() {
  std::mt19937 pick(std::random_device{}());
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = 15000 + int(pick() % 10000);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (free) return port;
  }
  return -1;
}

TEST_F(RendezvousTest, TwoWorkersGivenOnlySlurmsVariablesTrainTogether) {
  const int port = free_slurm_port();
  ASSERT_GT(port, 0);
  auto slurm = [&](int rank) {
    return std::map<std::string, std::string>{
        {"SLURM_PROCID", std::to_string(rank)},
        {"SLURM_LOCALID", std::to_string(rank)},
        {"SLURM_NODEID", "0"},
        {"SLURM_NTASKS", "2"},
        {"SLURM_NTASKS_PER_NODE", "2"},
        {"SLURM_JOB_NODELIST", "127.0.0.1"},
        {"SLURM_JOB_ID", std::to_string(70000 + port - 15000)},
        {"CUDA_VISIBLE_DEVICES", ""}};
  };
  test::Child rank0(train({}), slurm(0));
  test::Child rank1(train({}), slurm(1));
  const auto r0 = rank0.wait(120s), r1 = rank1.wait(120s);
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  EXPECT_NE(r0.output.find("world size 2 (slurm)"), std::string::npos) << r0.output;
  EXPECT_EQ(test::weight_fingerprints(r0.output + r1.output).size(), 1u);
}

}  // namespace
}  // namespace ddp

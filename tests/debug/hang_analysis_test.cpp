// The flight recorder's ring and file format, and the verdicts hang_analysis draws from the
// ranks' records: the rank that never started a collective, ranks that disagree, missing ranks.
#include <gtest/gtest.h>

#include <fstream>

#include "ddp/debug/flight_recorder.h"
#include "ddp/debug/hang_analysis.h"
#include "ddp/error.h"
#include "support/process.h"

namespace ddp {
namespace {

RecorderIdentity identity(int rank, int world_size) { return {rank, world_size, "gloo", "job-1"}; }

// A rank that issued `completed` all-reduces of 10 floats that completed, then `waiting` more
// still in flight, 20 s before its record was written.
RankRecord rank_record(int rank, int world_size, int completed, int waiting,
                       const std::string& op = "all-reduce") {
  FlightRecorder recorder(identity(rank, world_size), 100);
  for (int i = 0; i < completed + waiting; ++i) {
    recorder.set_step(i + 1);
    const int64_t seq = recorder.issue(op, "float32", {10});
    if (i < completed) recorder.complete(seq);
  }
  RankRecord r;
  r.identity = recorder.identity();
  r.host = "host";
  r.pid = 100 + rank;
  r.reason = "SIGTERM";
  r.collectives = recorder.records();
  r.issued = recorder.issued();
  r.step = completed + waiting;
  r.written_us = r.collectives.empty() ? 0 : r.collectives.back().issued_us + 20'000'000;
  return r;
}

TEST(FlightRecorder, KeepsTheLastCollectivesAndCountsThemAll) {
  FlightRecorder recorder(identity(0, 2), 3);
  recorder.set_step(4);
  for (int i = 0; i < 5; ++i) recorder.complete(recorder.issue("all-reduce", "float32", {2, 5}, 1));
  recorder.fail(recorder.issue("broadcast(root 0)", "int64", {3}), "peer gone");
  const auto records = recorder.records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(recorder.issued(), 6);
  EXPECT_EQ(records[0].seq, 4);
  EXPECT_EQ(records[1].name(), "all-reduce #5 (step 4, bucket 1)");
  EXPECT_EQ(records[1].signature(), "all-reduce float32[2x5]");
  EXPECT_EQ(records[1].state, CollectiveState::kCompleted);
  EXPECT_GE(records[1].completed_us, records[1].issued_us);
  EXPECT_EQ(records[2].name(), "broadcast(root 0) #6 (step 4)");
  EXPECT_EQ(records[2].state, CollectiveState::kFailed);
  EXPECT_EQ(records[2].error, "peer gone");
}

TEST(FlightRecorder, ARecordReadsBackAsWritten) {
  RankRecord written = rank_record(1, 2, 3, 1);
  written.reason = "all-reduce \"#4\" failed\nsecond line";
  const RankRecord read = rank_record_from_json(to_json(written), "x.json");
  EXPECT_EQ(to_json(read), to_json(written));
  EXPECT_EQ(read.collectives.size(), 4u);
  EXPECT_EQ(read.collectives.back().state, CollectiveState::kIssued);
  EXPECT_THROW(rank_record_from_json("{\"format\": 1}", "x.json"), DataError);
  EXPECT_THROW(rank_record_from_json("not json", "x.json"), DataError);
}

TEST(FlightRecorder, DumpsToItsDirectoryAndReadsBackTheNewestJobOnly) {
  const test::TempDir dir;
  FlightRecorder old_job({0, 2, "gloo", "old"}, 10);
  old_job.dump_to(dir.path(), false);
  old_job.issue("all-reduce", "float32", {1});
  ASSERT_EQ(old_job.dump("first"), rank_record_path(dir.path(), 0));
  FlightRecorder rank0({0, 2, "gloo", "new"}, 10), rank1({1, 2, "gloo", "new"}, 10);
  rank0.dump_to(dir.path(), false);
  rank1.dump_to(dir.path(), false);
  rank1.dump("second");
  const auto records = read_rank_records(dir.path());
  ASSERT_EQ(records.size(), 1u);  // rank 0's file is the old job's
  EXPECT_EQ(records[0].identity.rank, 1);
  EXPECT_EQ(records[0].reason, "second");
  const test::TempDir empty;
  EXPECT_THROW(read_rank_records(empty.path()), IoError);
}

TEST(HangAnalysis, NamesTheRankThatNeverStartedTheCollectiveTheOthersWaitedIn) {
  const HangDiagnosis d = diagnose_hang({rank_record(0, 4, 9, 2), rank_record(1, 4, 9, 0),
                                         rank_record(2, 4, 9, 1), rank_record(3, 4, 9, 1)});
  EXPECT_EQ(d.culprits, std::vector<int>{1});
  EXPECT_EQ(d.lines.front(),
            "rank 1 never started all-reduce #10 (step 10) of float32[10]; ranks 0, 2, 3 waited "
            "20.0 s in it");
  ASSERT_EQ(d.lines.size(), 5u);  // the verdict, then a line for each rank
  EXPECT_NE(d.lines[2].find("rank 1 (host, pid 101): at step 9, 9 collective(s) issued; the "
                            "last, all-reduce #9 (step 9) of float32[10], completed"),
            std::string::npos)
      << d.lines[2];
}

TEST(HangAnalysis, NamesBothSignaturesWhenTheRanksDisagree) {
  const HangDiagnosis d =
      diagnose_hang({rank_record(0, 3, 2, 1), rank_record(1, 3, 2, 1, "broadcast(root 0)"),
                     rank_record(2, 3, 2, 1)});
  EXPECT_EQ(d.culprits, std::vector<int>{1});
  EXPECT_NE(d.lines.front().find("ranks 0, 2 issued all-reduce float32[10]"), std::string::npos)
      << d.lines.front();
  EXPECT_NE(d.lines.front().find("rank 1 issued broadcast(root 0) float32[10]"), std::string::npos)
      << d.lines.front();
}

TEST(HangAnalysis, NamesARankThatLeftNoRecord) {
  const HangDiagnosis d = diagnose_hang({rank_record(0, 3, 5, 1), rank_record(2, 3, 5, 1)});
  EXPECT_EQ(d.culprits, std::vector<int>{1});
  EXPECT_EQ(d.lines.front().rfind("rank 1 left no record and all-reduce #6 (step 6)", 0), 0u)
      << d.lines.front();
  EXPECT_EQ(d.lines.back(), "rank 1: no record");
}

TEST(HangAnalysis, SaysSoWhenNoRankWasWaiting) {
  const HangDiagnosis d = diagnose_hang({rank_record(0, 2, 5, 0), rank_record(1, 2, 5, 0)});
  EXPECT_TRUE(d.culprits.empty());
  EXPECT_EQ(d.lines.front(), "no rank was waiting in a collective: the job did not hang in one");
}

}  // namespace
}  // namespace ddp

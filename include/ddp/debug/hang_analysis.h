// Why a job hung, from its ranks' flight records (flight_recorder.h) side by side: the rank
// that never started the collective the others waited in, ranks that disagree on what a
// collective is, ranks that left no record. The launcher prints it when a job with a debug
// directory fails; a program can print it afterwards from the records left in that directory.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "ddp/debug/flight_recorder.h"

namespace ddp {

struct HangDiagnosis {
  /// The verdict first ("rank 1 never started all-reduce #812 (step 203, bucket 0); rank 0
  /// waited 20.0 s in it"), then one line for each rank.
  std::vector<std::string> lines;
  /// The ranks the verdict names as the cause (empty when no rank is to blame).
  std::vector<int> culprits;
};

/// The records in `dir` of the job that wrote last there (older jobs' files are ignored), of
/// those written at or after `since_us` (Unix microseconds). Throws IoError when there are none.
std::vector<RankRecord> read_rank_records(const std::string& dir, int64_t since_us = 0);

/// Compares the records of one job.
HangDiagnosis diagnose_hang(const std::vector<RankRecord>& records);

/// The launcher's report on the records in `dir` (when not empty) written since `since_us`: a
/// line for each rank, then the verdict, last, so that it is what the user reads first; each
/// line of `program`'s own starts with "PROGRAM: ". Says so when there are no records.
void print_hang_report(std::FILE* out, const std::string& program, const std::string& dir,
                       int64_t since_us);

}  // namespace ddp

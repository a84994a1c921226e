#include "ddp/debug/hang_analysis.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "message_text.h"

namespace ddp {
namespace {

constexpr int64_t kNone = std::numeric_limits<int64_t>::max();

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(c10::str("cannot read ", path, ": ", std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += c10::str(i ? ", " : "", ranks[i]);
  return out;
}

std::string seconds_text(int64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", double(us) / 1e6);
  return buf;
}

const CollectiveRecord* find_seq(const RankRecord& r, int64_t seq) {
  for (const auto& c : r.collectives)
    if (c.seq == seq) return &c;
  return nullptr;
}

// The first collective this rank issued and did not see complete (kNone: none).
int64_t first_unfinished(const RankRecord& r) {
  for (const auto& c : r.collectives)
    if (c.state != CollectiveState::kCompleted) return c.seq;
  return kNone;
}

// How long the rank had been in `c` when it gave up or wrote its record.
int64_t waited_us(const RankRecord& r, const CollectiveRecord& c) {
  const int64_t end = c.state == CollectiveState::kFailed ? c.completed_us : r.written_us;
  return std::max<int64_t>(0, end - c.issued_us);
}

std::string rank_line(const RankRecord& r) {
  std::string line = c10::str("rank ", r.identity.rank, " (", r.host, ", pid ", r.pid, "): ");
  line += r.step >= 0 ? c10::str("at step ", r.step, ", ") : "";
  line += c10::str(r.issued, " collective(s) issued");
  if (!r.collectives.empty()) {
    const CollectiveRecord& last = r.collectives.back();
    line += c10::str("; the last, ", last.name(), " of ", last.payload(), ", ");
    if (last.state == CollectiveState::kCompleted) line += "completed";
    if (last.state == CollectiveState::kFailed) line += "failed";
    if (last.state == CollectiveState::kIssued)
      line += c10::str("in flight for ", seconds_text(waited_us(r, last)));
  }
  return c10::str(line, "; record written on: ", first_line(r.reason));
}

// The verdict on collective `seq`, the first one some rank did not see complete.
void judge(const std::vector<RankRecord>& records, const std::vector<int>& missing, int64_t seq,
           HangDiagnosis& d) {
  std::vector<int> never_started, waiting;
  const CollectiveRecord* what = nullptr;
  int64_t longest_wait = 0;
  std::map<std::string, std::vector<int>> signatures;
  for (const RankRecord& r : records) {
    const CollectiveRecord* c = find_seq(r, seq);
    if (r.issued < seq) {
      never_started.push_back(r.identity.rank);
      continue;
    }
    if (c == nullptr) continue;  // no longer kept in that rank's ring
    signatures[c->signature()].push_back(r.identity.rank);
    if (c->state != CollectiveState::kCompleted) {
      waiting.push_back(r.identity.rank);
      longest_wait = std::max(longest_wait, waited_us(r, *c));
      what = what ? what : c;
    }
  }
  if (what == nullptr) return;
  if (signatures.size() > 1) {
    std::string line = c10::str("the ranks disagree on collective #", seq, ":");
    for (const auto& [signature, ranks] : signatures)
      line += c10::str(" ", rank_list(ranks), " issued ", signature, ";");
    d.lines.push_back(line + " every rank must issue the same collectives in the same order");
    for (const auto& entry : signatures) {
      if (entry.second.size() < records.size() / 2 + 1)
        d.culprits.insert(d.culprits.end(), entry.second.begin(), entry.second.end());
    }
    return;
  }
  const std::string waited =
      c10::str(rank_list(waiting), " waited ", seconds_text(longest_wait), " in it");
  if (!never_started.empty()) {
    d.lines.push_back(c10::str(rank_list(never_started), " never started ", what->name(), " of ",
                               what->payload(), "; ", waited));
    d.culprits = never_started;
  } else if (!missing.empty()) {
    d.lines.push_back(c10::str(rank_list(missing), " left no record and ", what->name(),
                               " never completed; ", waited,
                               ": the missing rank(s) died or were killed (SIGKILL) first"));
    d.culprits = missing;
  } else {
    d.lines.push_back(c10::str(
        "every rank started ", what->name(), " of ", what->payload(), " and it never completed (",
        waited, "): no rank is missing from it; suspect the network or the backend"));
  }
}

}  // namespace

std::vector<RankRecord> read_rank_records(const std::string& dir, int64_t since_us) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    throw IoError(c10::str("cannot read the debug directory ", dir, ": ", std::strerror(errno)));
  }
  std::vector<RankRecord> all;
  while (const dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (name.rfind("flight-rank-", 0) != 0 || name.size() < 5 ||
        name.compare(name.size() - 5, 5, ".json") != 0)
      continue;
    const std::string path = c10::str(dir, "/", name);
    RankRecord record = rank_record_from_json(read_whole_file(path), path);
    if (record.written_us >= since_us) all.push_back(std::move(record));
  }
  ::closedir(d);
  if (all.empty()) {
    throw IoError(c10::str("no flight records (flight-rank-N.json) in ", dir,
                           "; they are written there when a job run with this debug directory "
                           "fails, times out or is stopped with SIGTERM"));
  }
  // The job that wrote last: a directory reused across runs keeps older jobs' files.
  const auto newest = std::max_element(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.written_us < b.written_us;
  });
  const std::string job = newest->identity.job;
  std::vector<RankRecord> records;
  for (auto& r : all)
    if (r.identity.job == job) records.push_back(std::move(r));
  std::sort(records.begin(), records.end(),
            [](const auto& a, const auto& b) { return a.identity.rank < b.identity.rank; });
  return records;
}

HangDiagnosis diagnose_hang(const std::vector<RankRecord>& records) {
  HangDiagnosis d;
  if (records.empty()) return d;
  const int world_size = records.front().identity.world_size;
  std::vector<int> missing;
  for (int rank = 0, i = 0; rank < world_size; ++rank) {
    if (i < int(records.size()) && records[size_t(i)].identity.rank == rank) {
      ++i;
    } else {
      missing.push_back(rank);
    }
  }
  int64_t seq = kNone;
  for (const RankRecord& r : records) seq = std::min(seq, first_unfinished(r));
  if (seq != kNone) judge(records, missing, seq, d);
  if (d.lines.empty()) {
    d.lines.push_back(
        missing.empty()
            ? "no rank was waiting in a collective: the job did not hang in one"
            : c10::str(rank_list(missing),
                       " left no record (died, or was killed with SIGKILL); no other rank was "
                       "waiting in a collective"));
    if (!missing.empty()) d.culprits = missing;
  }
  for (const RankRecord& r : records) d.lines.push_back(rank_line(r));
  for (int rank : missing) d.lines.push_back(c10::str("rank ", rank, ": no record"));
  return d;
}

void print_hang_report(std::FILE* out, const std::string& program, const std::string& dir,
                       int64_t since_us) {
  if (dir.empty()) return;
  try {
    const HangDiagnosis d = diagnose_hang(read_rank_records(dir, since_us));
    std::fprintf(out, "%s: flight records in %s:\n", program.c_str(), dir.c_str());
    for (size_t i = 1; i < d.lines.size(); ++i) std::fprintf(out, "    %s\n", d.lines[i].c_str());
    std::fprintf(out, "%s: %s\n", program.c_str(), d.lines.front().c_str());
  } catch (const std::exception& e) {
    std::fprintf(out, "%s: no flight records to compare: %s\n", program.c_str(),
                 first_line(e.what()).c_str());
  }
}

}  // namespace ddp

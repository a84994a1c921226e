// A rank's flight record in PyTorch's own flight-recorder format (the pickled dump its NCCL
// process group writes: version, pg_config, entries), so that PyTorch's analyzer, `torchfrtrace
// DIR`, finds the culprit of a ddp.cpp hang as it does for a PyTorch job. Format as torch 2.14's
// analyzer reads it (torch/distributed/flight_recorder): version "2.10"; entries matched across
// ranks by (process group, collective_seq_id) and aligned by record_id; profiling_name
// "<backend>:<op>" with PyTorch's op names; dtypes as c10 names them.
#include <map>
#include <set>
#include <string>
#include <vector>

#include <c10/util/StringUtil.h>

#include "checkpoint/pickle_format.h"
#include "ddp/debug/flight_recorder.h"
#include "ddp/error.h"

namespace ddp {
namespace {

using Dict = c10::impl::GenericDict;
using List = c10::impl::GenericList;

// Our op names ("all-reduce(max)", "broadcast(root 0)") as PyTorch's.
std::string pytorch_op(const std::string& op) {
  if (op.rfind("all-reduce", 0) == 0) return "all_reduce";
  if (op.rfind("broadcast", 0) == 0) return "broadcast";
  if (op.rfind("all-gather", 0) == 0) return "all_gather";
  if (op.rfind("reduce-scatter", 0) == 0) return "reduce_scatter";
  if (op == "barrier") return "barrier";
  return op;
}

// Python's dtype names, which the records keep, as c10's.
std::string c10_dtype(const std::string& dtype) {
  static const std::map<std::string, std::string> names = {
      {"float32", "Float"}, {"float64", "Double"}, {"float16", "Half"}, {"bfloat16", "BFloat16"},
      {"int64", "Long"},    {"int32", "Int"},      {"uint8", "Byte"}};
  auto it = names.find(dtype);
  return it == names.end() ? dtype : it->second;
}

// The analyzer accepts these backends' names only; MPI's collectives are shown under Gloo's.
std::string pytorch_backend(const std::string& backend) {
  static const std::set<std::string> known = {"nccl", "gloo"};
  return known.count(backend) ? backend : "gloo";
}

List sizes_list(const std::vector<int64_t>& shape) {
  List dims(c10::AnyType::get());
  for (int64_t d : shape) dims.push_back(d);
  List all(c10::AnyType::get());
  all.push_back(dims);
  return all;
}

List one_string(const std::string& s) {
  List list(c10::AnyType::get());
  list.push_back(s);
  return list;
}

Dict entry(const CollectiveRecord& c, const RankRecord& r) {
  const bool barrier = c.op == "barrier";  // PyTorch's barrier all-reduces one element
  const std::vector<int64_t> input = barrier ? std::vector<int64_t>{1} : c.shape;
  std::vector<int64_t> output = input;
  if (c.op.rfind("all-gather", 0) == 0) output = {c.numel() * r.identity.world_size};
  if (c.op.rfind("reduce-scatter", 0) == 0) output = {c.numel() / r.identity.world_size};
  const std::string dtype = barrier ? "Float" : c10_dtype(c.dtype);
  const bool completed = c.state == CollectiveState::kCompleted;
  Dict e(c10::StringType::get(), c10::AnyType::get());
  e.insert("record_id", c.seq - 1);  // the same numbering on every rank
  e.insert("pg_id", int64_t(0));
  e.insert("process_group",
           c10::ivalue::Tuple::create({std::string("0"), std::string("default_pg")}));
  e.insert("collective_seq_id", c.seq);
  e.insert("p2p_seq_id", int64_t(0));
  e.insert("op_id", c.seq);
  e.insert("profiling_name", pytorch_backend(r.identity.backend) + ":" + pytorch_op(c.op));
  e.insert("time_created_ns", c.issued_us * 1000);
  e.insert("input_sizes", sizes_list(input));
  e.insert("input_dtypes", one_string(dtype));
  e.insert("output_sizes", sizes_list(output));
  e.insert("output_dtypes", one_string(dtype));
  e.insert("state", std::string(completed ? "completed" : "started"));
  e.insert("time_discovered_started_ns", c.issued_us * 1000);
  e.insert("time_discovered_completed_ns",
           completed ? c10::IValue(c.completed_us * 1000) : c10::IValue());
  e.insert("retired", completed);
  e.insert("is_p2p", false);
  e.insert("frames", List(c10::AnyType::get()));
  return e;
}

}  // namespace

std::vector<char> to_pytorch_dump(const RankRecord& record) {
  std::string ranks = "[";
  for (int r = 0; r < record.identity.world_size; ++r) ranks += (r ? ", " : "") + std::to_string(r);
  Dict group(c10::StringType::get(), c10::AnyType::get());
  group.insert("name", std::string("0"));
  group.insert("desc", record.identity.description);
  group.insert("ranks", ranks + "]");
  Dict pg_config(c10::StringType::get(), c10::AnyType::get());
  pg_config.insert("0", group);
  List entries(c10::AnyType::get());
  for (const CollectiveRecord& c : record.collectives) entries.push_back(entry(c, record));
  Dict dump(c10::StringType::get(), c10::AnyType::get());
  dump.insert("version", std::string("2.10"));
  dump.insert("pg_config", pg_config);
  dump.insert("entries", entries);
  return python_pickle(dump);
}

std::string pytorch_dump_path(const std::string& dir, int rank) {
  return c10::str(dir, "/fr_trace_rank_", rank);
}

}  // namespace ddp

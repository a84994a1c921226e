#include "ddp/world.h"

#include <cerrno>
#include <climits>
#include <cstdlib>

#include <c10/util/StringUtil.h>

#include "ddp/environment.h"
#include "ddp/error.h"
#include "launcher_handshake.h"
#include "message_text.h"

extern char** environ;

namespace ddp {
namespace {

using Env = std::map<std::string, std::string>;

const std::string* get(const Env& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

int get_int(const Env& env, const std::string& name, int fallback, int min, int max) {
  const std::string* v = get(env, name);
  return v ? parse_int(*v, "environment variable " + name, min, max) : fallback;
}

void read_master(const Env& env, WorldInfo& w) {
  if (const std::string* addr = get(env, env::kMasterAddr)) w.master_addr = *addr;
  if (get(env, env::kMasterPort)) {
    w.master_port = get_int(env, env::kMasterPort, 29500, 1, 65535);
    w.master_port_set = true;
  }
}

// SLURM_TASKS_PER_NODE looks like "4(x2),3": the first node's count is the leading number.
int leading_int(const std::string& text) { return std::atoi(text.c_str()); }

}  // namespace

int parse_int(const std::string& text, const std::string& what, int min, int max) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < min || v > max) {
    throw InvalidArgument(
        c10::str(what, ": '", text, "' is not an integer in [", min, ", ", max, "]"));
  }
  return int(v);
}

std::string first_slurm_host(const std::string& nodelist) {
  // Take the first comma-separated item outside brackets, then expand its first range.
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    first += c;
  }
  const size_t open = first.find('[');
  if (open == std::string::npos) return first;
  std::string range = first.substr(open + 1);
  const size_t stop = range.find_first_of("-,]");
  return first.substr(0, open) + range.substr(0, stop);
}

namespace {

// What ddp.cpp's launcher adds (launcher_handshake.h): its store's file or key prefix,
// --on-failure, a newcomer, an elastic round's progress key and cause.
std::shared_ptr<const LauncherHandshake> read_handshake(const Env& env, const WorldInfo& w) {
  auto h = std::make_shared<LauncherHandshake>();
  if (const std::string* file = get(env, env::kStoreFile)) h->store_file = *file;
  if (const std::string* prefix = get(env, env::kStorePrefix)) {
    h->store_prefix = *prefix;
  } else if (w.agent_store) {
    h->store_prefix = c10::str("/worker/attempt_", w.restart_count);
  }
  if (const std::string* mode = get(env, env::kOnFailure)) {
    if (*mode != "continue" && *mode != "restart") {
      throw InvalidArgument(c10::str("environment variable ", env::kOnFailure, ": '", *mode,
                                     "' is neither continue nor restart"));
    }
    h->fault_tolerant = *mode == "continue";
  }
  const std::string* newcomer = get(env, env::kNewcomer);
  h->newcomer = newcomer && *newcomer == "1";
  if (const std::string* key = get(env, env::kProgressKey)) h->progress_key = *key;
  if (const std::string* cause = get(env, env::kRoundCause)) h->round_cause = *cause;
  return h;
}

}  // namespace

WorldInfo WorldInfo::from_map(const Env& env) {
  WorldInfo w;
  if (get(env, env::kRank) || get(env, env::kWorldSize)) {
    w.source = "torchrun";
    if (!get(env, env::kRank) || !get(env, env::kWorldSize)) {
      throw InvalidArgument(c10::str(env::kRank, " and ", env::kWorldSize,
                                     " must be set together (torchrun sets both)"));
    }
    w.world_size = get_int(env, env::kWorldSize, 1, 1, 1 << 20);
    w.rank = get_int(env, env::kRank, 0, 0, INT_MAX);
    w.local_rank = get_int(env, env::kLocalRank, w.rank, 0, INT_MAX);
    w.local_world_size = get_int(env, env::kLocalWorldSize, w.world_size, 1, 1 << 20);
    w.group_rank = get_int(env, env::kGroupRank, 0, 0, INT_MAX);
    w.restart_count = get_int(env, env::kRestartCount, 0, 0, INT_MAX);
    const std::string* agent = get(env, env::kUseAgentStore);
    w.agent_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
    w.launcher = read_handshake(env, w);
    read_master(env, w);
  } else if (get(env, env::kSlurmProcId) && get(env, env::kSlurmNtasks)) {
    w.source = "slurm";
    w.world_size = get_int(env, env::kSlurmNtasks, 1, 1, 1 << 20);
    w.rank = get_int(env, env::kSlurmProcId, 0, 0, INT_MAX);
    w.local_rank = get_int(env, env::kSlurmLocalId, 0, 0, INT_MAX);
    w.group_rank = get_int(env, env::kSlurmNodeId, 0, 0, INT_MAX);
    if (const std::string* per = get(env, env::kSlurmNtasksPerNode)) {
      w.local_world_size = std::max(1, leading_int(*per));
    } else if (const std::string* tasks = get(env, env::kSlurmTasksPerNode)) {
      w.local_world_size = std::max(1, leading_int(*tasks));
    } else {
      w.local_world_size = w.world_size;
    }
    const std::string* nodes = get(env, env::kSlurmJobNodelist);
    if (!nodes) nodes = get(env, env::kSlurmNodelist);
    if (nodes) w.master_addr = first_slurm_host(*nodes);
    if (const std::string* job = get(env, env::kSlurmJobId)) {
      const int id =
          parse_int(*job, c10::str("environment variable ", env::kSlurmJobId), 0, INT_MAX);
      w.master_port = 15000 + id % 10000;
      w.master_port_set = nodes != nullptr;  // a whole address: plain `srun ddp-train` works
    }
    read_master(env, w);
  } else if (get(env, env::kOmpiRank) && get(env, env::kOmpiSize)) {
    w.source = "openmpi";
    w.world_size = get_int(env, env::kOmpiSize, 1, 1, 1 << 20);
    w.rank = get_int(env, env::kOmpiRank, 0, 0, INT_MAX);
    w.local_rank = get_int(env, env::kOmpiLocalRank, 0, 0, INT_MAX);
    w.local_world_size = get_int(env, env::kOmpiLocalSize, w.world_size, 1, 1 << 20);
    // The node's index as mpirun's default mapping (by slot) places ranks: node by node.
    // (OMPI_COMM_WORLD_NODE_RANK is not it: it numbers processes within a node.)
    w.group_rank = w.rank / w.local_world_size;
    read_master(env, w);
  } else {
    read_master(env, w);
  }
  if (w.rank >= w.world_size) {
    throw InvalidArgument(c10::str("rank ", w.rank, " is not below the world size ", w.world_size,
                                   " (from ", w.source, "'s environment variables); ranks are 0..",
                                   w.world_size - 1));
  }
  if (w.local_rank >= w.local_world_size) {
    throw InvalidArgument(c10::str("local rank ", w.local_rank,
                                   " is not below the local world size ", w.local_world_size,
                                   " (from ", w.source, "'s environment variables)"));
  }
  return w;
}

WorldInfo WorldInfo::from_environment() {
  Env env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return from_map(env);
}

}  // namespace ddp

#include "ddp/world.h"

#include <cerrno>
#include <climits>
#include <cstdlib>

#include "ddp/error.h"

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
  if (const std::string* addr = get(env, "MASTER_ADDR")) w.master_addr = *addr;
  if (get(env, "MASTER_PORT")) {
    w.master_port = get_int(env, "MASTER_PORT", 29500, 1, 65535);
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
        concat(what, ": '", text, "' is not an integer in [", min, ", ", max, "]"));
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

WorldInfo WorldInfo::from_map(const Env& env) {
  WorldInfo w;
  if (get(env, "RANK") || get(env, "WORLD_SIZE")) {
    w.source = "torchrun";
    if (!get(env, "RANK") || !get(env, "WORLD_SIZE")) {
      throw InvalidArgument("RANK and WORLD_SIZE must be set together (torchrun sets both)");
    }
    w.world_size = get_int(env, "WORLD_SIZE", 1, 1, 1 << 20);
    w.rank = get_int(env, "RANK", 0, 0, INT_MAX);
    w.local_rank = get_int(env, "LOCAL_RANK", w.rank, 0, INT_MAX);
    w.local_world_size = get_int(env, "LOCAL_WORLD_SIZE", w.world_size, 1, 1 << 20);
    w.group_rank = get_int(env, "GROUP_RANK", 0, 0, INT_MAX);
    w.restart_count = get_int(env, "TORCHELASTIC_RESTART_COUNT", 0, 0, INT_MAX);
    const std::string* agent = get(env, "TORCHELASTIC_USE_AGENT_STORE");
    w.agent_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
    if (const std::string* file = get(env, "DDP_STORE_FILE")) w.store_file = *file;
    read_master(env, w);
  } else if (get(env, "SLURM_PROCID") && get(env, "SLURM_NTASKS")) {
    w.source = "slurm";
    w.world_size = get_int(env, "SLURM_NTASKS", 1, 1, 1 << 20);
    w.rank = get_int(env, "SLURM_PROCID", 0, 0, INT_MAX);
    w.local_rank = get_int(env, "SLURM_LOCALID", 0, 0, INT_MAX);
    w.group_rank = get_int(env, "SLURM_NODEID", 0, 0, INT_MAX);
    if (const std::string* per = get(env, "SLURM_NTASKS_PER_NODE")) {
      w.local_world_size = std::max(1, leading_int(*per));
    } else if (const std::string* tasks = get(env, "SLURM_TASKS_PER_NODE")) {
      w.local_world_size = std::max(1, leading_int(*tasks));
    } else {
      w.local_world_size = w.world_size;
    }
    const std::string* nodes = get(env, "SLURM_JOB_NODELIST");
    if (!nodes) nodes = get(env, "SLURM_NODELIST");
    if (nodes) w.master_addr = first_slurm_host(*nodes);
    read_master(env, w);
  } else if (get(env, "OMPI_COMM_WORLD_RANK") && get(env, "OMPI_COMM_WORLD_SIZE")) {
    w.source = "openmpi";
    w.world_size = get_int(env, "OMPI_COMM_WORLD_SIZE", 1, 1, 1 << 20);
    w.rank = get_int(env, "OMPI_COMM_WORLD_RANK", 0, 0, INT_MAX);
    w.local_rank = get_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, 0, INT_MAX);
    w.local_world_size = get_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", w.world_size, 1, 1 << 20);
    w.group_rank = get_int(env, "OMPI_COMM_WORLD_NODE_RANK", 0, 0, INT_MAX);
    read_master(env, w);
  } else {
    read_master(env, w);
  }
  if (w.rank >= w.world_size) {
    throw InvalidArgument(concat("rank ", w.rank, " is not below the world size ", w.world_size,
                                 " (from ", w.source, "'s environment variables); ranks are 0..",
                                 w.world_size - 1));
  }
  if (w.local_rank >= w.local_world_size) {
    throw InvalidArgument(concat("local rank ", w.local_rank, " is not below the local world size ",
                                 w.local_world_size, " (from ", w.source,
                                 "'s environment variables)"));
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

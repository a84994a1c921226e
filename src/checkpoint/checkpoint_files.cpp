// The checkpoint folder: file names by epoch and step, the newest of them, pruning the oldest.
#include "ddp/checkpoint/checkpoint.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace ddp {

std::string checkpoint_path(const std::string& dir, int64_t epoch, int64_t step_in_epoch) {
  char name[80];
  if (step_in_epoch > 0) {
    std::snprintf(name, sizeof name, "checkpoint-epoch-%04lld-step-%08lld.pt",
                  static_cast<long long>(epoch), static_cast<long long>(step_in_epoch));
  } else {
    std::snprintf(name, sizeof name, "checkpoint-epoch-%04lld.pt", static_cast<long long>(epoch));
  }
  return dir + "/" + name;
}

namespace {
// ((epoch, step in the epoch), path) of every finished checkpoint in dir, oldest first;
// temporary files are ignored.
std::vector<std::pair<std::pair<int64_t, int64_t>, std::string>> list_checkpoints(
    const std::string& dir) {
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::string>> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    long long epoch = 0, step = 0;
    char tail[8] = {0};
    const std::string path = dir + "/" + e->d_name;
    if (std::sscanf(e->d_name, "checkpoint-epoch-%lld-step-%lld%7s", &epoch, &step, tail) == 3 &&
        std::strcmp(tail, ".pt") == 0) {
      out.push_back({{epoch, step}, path});
    } else if (std::sscanf(e->d_name, "checkpoint-epoch-%lld%7s", &epoch, tail) == 2 &&
               std::strcmp(tail, ".pt") == 0) {
      out.push_back({{epoch, 0}, path});
    }
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

std::string latest_checkpoint(const std::string& dir) {
  const auto all = list_checkpoints(dir);
  return all.empty() ? "" : all.back().second;
}

void prune_checkpoints(const std::string& dir, int keep) {
  auto all = list_checkpoints(dir);
  for (size_t i = 0; i + size_t(std::max(keep, 1)) < all.size(); ++i)
    ::unlink(all[i].second.c_str());
}

}  // namespace ddp

#include "ddp/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "unique_fd.h"

namespace ddp {
namespace {

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void fsync_dir(const std::string& dir) {
  const UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.valid()) ::fsync(fd.get());
}

}  // namespace

void write_file_atomic(const std::string& path, const void* data, size_t size) {
  std::string tmp_template = path + ".tmp-XXXXXX";
  std::vector<char> name(tmp_template.begin(), tmp_template.end());
  name.push_back('\0');
  UniqueFd fd(::mkstemp(name.data()));
  if (!fd.valid()) {
    throw IoError(c10::str("cannot create a file next to ", path, ": ", std::strerror(errno),
                           "; check that the directory exists and is writable"));
  }
  const std::string tmp(name.data());
  auto fail = [&](const char* what) {
    const int err = errno;
    fd.reset();
    ::unlink(tmp.c_str());
    throw IoError(c10::str("cannot write ", path, " (", what, "): ", std::strerror(err),
                           "; the previous file, if any, is untouched"));
  };
  const char* p = static_cast<const char*>(data);
  size_t left = size;
  while (left > 0) {
    const ssize_t n = ::write(fd.get(), p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write");
    }
    p += n;
    left -= size_t(n);
  }
  if (::fchmod(fd.get(), 0644) != 0) fail("chmod");
  if (::fsync(fd.get()) != 0) fail("fsync");
  if (fd.close() != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(c10::str("cannot write ", path, " (close): ", std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(c10::str("cannot rename ", tmp, " to ", path, ": ", std::strerror(err)));
  }
  fsync_dir(parent_dir(path));
}

void make_directories(const std::string& dir) {
  if (dir.empty()) return;
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      throw IoError(c10::str("cannot create directory ", partial, ": ", std::strerror(errno)));
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw IoError(c10::str(dir, " exists but is not a directory"));
  }
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace ddp

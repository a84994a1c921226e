#include "elastic/launch_guards.h"

#include <stdlib.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <c10/util/StringUtil.h>

#include "ddp/environment.h"
#include "ddp/error.h"

namespace ddp {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) { g_stop_signal = sig; }

}  // namespace

StopSignals::StopSignals() {
  g_stop_signal = 0;
  // No SA_RESTART: a signal interrupts the launcher's poll() so that it is noticed at once.
  struct sigaction noting {};
  noting.sa_handler = on_stop_signal;
  sigemptyset(&noting.sa_mask);
  ::sigaction(SIGINT, &noting, &previous_int_);
  ::sigaction(SIGTERM, &noting, &previous_term_);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGTERM, &previous_term_, nullptr);
  ::sigaction(SIGINT, &previous_int_, nullptr);
}

int StopSignals::received() const { return g_stop_signal; }

TempDirectory::TempDirectory(const std::string& prefix) {
  const char* tmp = std::getenv(env::kTmpDir);
  std::string name = c10::str(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/", prefix, "XXXXXX");
  if (::mkdtemp(name.data()) == nullptr) {
    throw IoError(c10::str("cannot create a directory like ", name, ": ", std::strerror(errno)));
  }
  path_ = std::move(name);
}

TempDirectory::~TempDirectory() {
  // What is in it is ours (the workers' store files): nothing there is worth an error on the
  // way out, which may be an exception's.
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace ddp

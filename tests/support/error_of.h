// The message of the exception of type E that f() throws, or "(no error)": for tests that check
// what an error says.
#pragma once

#include <string>

namespace ddp::test {

template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace ddp::test

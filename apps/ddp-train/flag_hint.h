// libddp's errors speak of the library's options (it knows nothing of command lines); where
// ddp-train calls the library with values its flags set, it adds those flags to the message.
#pragma once

#include <string>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"

namespace ddp::train {

/// Calls `call`; an InvalidArgument, IoError or DataError it throws is thrown again, of the same
/// kind, with `hint` (the flags concerned: "--data-dir DIR, --download") after the message.
template <class Call>
auto with_flag_hint(const std::string& hint, Call&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(c10::str(e.what(), " (ddp-train: ", hint, ")"));
  } catch (const IoError& e) {
    throw IoError(c10::str(e.what(), " (ddp-train: ", hint, ")"));
  } catch (const DataError& e) {
    throw DataError(c10::str(e.what(), " (ddp-train: ", hint, ")"));
  }
}

}  // namespace ddp::train

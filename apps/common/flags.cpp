#include "flags.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <c10/util/StringUtil.h>

namespace ddp::cli {

double parse_double(const std::string& flag, const std::string& text, double min, double max) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || v < min || v > max) {
    throw InvalidArgument(
        c10::str(flag, ": '", text, "' is not a number in [", min, ", ", max, "]"));
  }
  return v;
}

int64_t parse_int64(const std::string& flag, const std::string& text, int64_t min, int64_t max) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < min || v > max) {
    throw InvalidArgument(
        c10::str(flag, ": '", text, "' is not an integer in [", min, ", ", max, "]"));
  }
  return v;
}

std::string number_text(double value) {
  char text[64];
  const auto end = std::to_chars(text, text + sizeof text, value, std::chars_format::general).ptr;
  return std::string(text, end);
}

std::string or_list(const std::vector<std::string>& words) {
  std::string list;
  for (size_t i = 0; i < words.size(); ++i) {
    list += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
  }
  return list;
}

void split_assignment(std::string& name, std::string& value, bool& has_value) {
  const size_t eq = name.find('=');
  has_value = name.rfind("--", 0) == 0 && eq != std::string::npos;
  if (!has_value) return;
  value = name.substr(eq + 1);
  name = name.substr(0, eq);
}

std::string help_line(const std::string& flag, const std::string& value, const std::string& help) {
  constexpr size_t kColumn = 28;
  std::string left = "  " + flag + (value.empty() ? "" : " " + value);
  if (left.size() < kColumn) {
    left.resize(kColumn, ' ');
  } else {
    left += "\n" + std::string(kColumn, ' ');
  }
  return left + help + "\n";
}

}  // namespace ddp::cli

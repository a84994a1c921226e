// Small helpers for the library's messages and the numbers in them. Private: a program formats
// its own (c10::str joins a message's parts).
#pragma once

#include <chrono>
#include <string>

namespace ddp {

/// The first line of a message (c10 errors carry a backtrace after it).
inline std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

/// A duration in seconds, as messages say it ("within 2.5 s").
inline double seconds(std::chrono::milliseconds ms) { return double(ms.count()) / 1000.0; }

/// Parses a decimal integer in [min, max]; throws InvalidArgument naming `what` otherwise
/// (world.cpp).
int parse_int(const std::string& text, const std::string& what, int min, int max);

}  // namespace ddp

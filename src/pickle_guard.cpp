#include "pickle_guard.h"

#include <cstdint>
#include <cstdio>

#include "ddp/error.h"

namespace ddp {
namespace {

// How an opcode's argument is laid out (pickle protocols 0 to 5, Lib/pickletools.py).
enum class Arg {
  kNone,      // no argument
  kFixed,     // `size` bytes
  kLength,    // a little-endian length of `size` bytes, then that many bytes
  kLine,      // bytes up to a newline
  kTwoLines,  // two newline-terminated lines (GLOBAL, INST)
  kInvalid,
};
struct Layout {
  Arg arg = Arg::kInvalid;
  int size = 0;
};

// clang-format off: a table, one line per layout
Layout layout_of(uint8_t op) {
  switch (op) {
    case '(':
    case '.':
    case '0':
    case '1':
    case '2':
    case 'N':
    case 'Q':
    case 'R':
    case 'a':
    case 'b':
    case 'd':
    case '}':
    case 'e':
    case 'l':
    case ']':
    case 'o':
    case 's':
    case 't':
    case ')':
    case 'u':
    case 0x81:
    case 0x85:
    case 0x86:
    case 0x87:
    case 0x88:
    case 0x89:
    case 0x8f:
    case 0x90:
    case 0x91:
    case 0x92:
    case 0x93:
    case 0x94:
    case 0x97:
    case 0x98:
      return {Arg::kNone, 0};
    case 'K':
    case 'h':
    case 'q':
    case 0x80:
    case 0x82:
      return {Arg::kFixed, 1};
    case 'M':
    case 0x83:
      return {Arg::kFixed, 2};
    case 'J':
    case 'j':
    case 'r':
    case 0x84:
      return {Arg::kFixed, 4};
    case 'G':
    case 0x95:
      return {Arg::kFixed, 8};  // FRAME's length only announces a frame
    case 'U':
    case 'C':
    case 0x8a:
    case 0x8c:
      return {Arg::kLength, 1};
    case 'T':
    case 'X':
    case 'B':
    case 0x8b:
      return {Arg::kLength, 4};
    case 0x8d:
    case 0x8e:
    case 0x96:
      return {Arg::kLength, 8};
    case 'F':
    case 'I':
    case 'L':
    case 'P':
    case 'S':
    case 'V':
    case 'g':
    case 'p':
      return {Arg::kLine, 0};
    case 'c':
    case 'i':
      return {Arg::kTwoLines, 0};
    default:
      return {};
  }
}
// clang-format on

// LibTorch 1.13's Unpickler::setInput fills the memo with empty values up to a BINPUT's id, so
// LONG_BINPUT 0x45000000 allocates 18 GB. Picklers number memo entries 0, 1, 2, ... and each
// takes at least one opcode byte, so a real id is below the pickle's length; that bounds the
// memo at 16 bytes (one IValue) per byte of input.
std::string memo_id_problem(const std::string& pickle, size_t start) {
  uint64_t id = 0;
  for (size_t i = 4; i >= 1; --i) id = id << 8 | uint8_t(pickle[start + i]);
  if (id < pickle.size()) return "";
  return concat("a memo id of ", id, " at byte ", start, " is beyond the pickle's ", pickle.size(),
                " bytes");
}

}  // namespace

std::string pickle_framing_problem(const std::string& pickle) {
  const size_t n = pickle.size();
  size_t at = 0;
  while (at < n) {
    const size_t start = at;
    const auto op = uint8_t(pickle[at++]);
    const Layout layout = layout_of(op);
    switch (layout.arg) {
      case Arg::kInvalid: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", unsigned(op));
        return concat("opcode ", hex, " at byte ", start, " is not a pickle opcode");
      }
      case Arg::kNone:
        if (op == '.') return "";  // STOP
        break;
      case Arg::kFixed:
        at += size_t(layout.size);
        if (op == 'r' && at <= n) {  // LONG_BINPUT
          const std::string problem = memo_id_problem(pickle, start);
          if (!problem.empty()) return problem;
        }
        break;
      case Arg::kLength: {
        if (n - at < size_t(layout.size)) return concat("truncated length at byte ", start);
        uint64_t length = 0;
        for (int i = layout.size - 1; i >= 0; --i)
          length = length << 8 | uint8_t(pickle[at + size_t(i)]);
        at += size_t(layout.size);
        if (length > n - at) {
          return concat("a length of ", length, " at byte ", start, " runs past the end (", n,
                        " bytes)");
        }
        at += size_t(length);
        break;
      }
      case Arg::kLine:
      case Arg::kTwoLines:
        for (int line = 0; line < (layout.arg == Arg::kLine ? 1 : 2); ++line) {
          const size_t end = pickle.find('\n', at);
          if (end == std::string::npos) return concat("unterminated line at byte ", start);
          at = end + 1;
        }
        break;
    }
    if (at > n) return concat("truncated argument at byte ", start);
  }
  return "no STOP";
}

}  // namespace ddp

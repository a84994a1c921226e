#include "checkpoint/pickle_guard.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <string_view>

#include <c10/util/StringUtil.h>

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

// Each opcode's argument, from a table with one row per layout (opcodes not in it are invalid).
Layout layout_of(uint8_t op) {
  struct Row {
    std::string_view ops;
    Layout layout;
  };
  static const std::array<Layout, 256> table = [] {
    const Row rows[] = {
        {"(.012NQRabd}el]ost)u\x81\x85\x86\x87\x88\x89\x8f\x90\x91\x92\x93\x94\x97\x98",
         {Arg::kNone, 0}},
        {"Khq\x80\x82", {Arg::kFixed, 1}},
        {"M\x83", {Arg::kFixed, 2}},
        {"Jjr\x84", {Arg::kFixed, 4}},
        {"G\x95", {Arg::kFixed, 8}},  // FRAME's length only announces a frame
        {"UC\x8a\x8c", {Arg::kLength, 1}},
        {"TXB\x8b", {Arg::kLength, 4}},
        {"\x8d\x8e\x96", {Arg::kLength, 8}},
        {"FILPSVgp", {Arg::kLine, 0}},
        {"ci", {Arg::kTwoLines, 0}},
    };
    std::array<Layout, 256> layouts{};
    for (const Row& row : rows) {
      for (char op : row.ops) layouts[uint8_t(op)] = row.layout;
    }
    return layouts;
  }();
  return table[op];
}

// LibTorch 1.13's Unpickler::setInput fills the memo with empty values up to a BINPUT's id, so
// LONG_BINPUT 0x45000000 allocates 18 GB. Picklers number memo entries 0, 1, 2, ... and each
// takes at least one opcode byte, so a real id is below the pickle's length; that bounds the
// memo at 16 bytes (one IValue) per byte of input.
std::string memo_id_problem(const std::string& pickle, size_t start) {
  uint64_t id = 0;
  for (size_t i = 4; i >= 1; --i) id = id << 8 | uint8_t(pickle[start + i]);
  if (id < pickle.size()) return "";
  return c10::str("a memo id of ", id, " at byte ", start, " is beyond the pickle's ",
                  pickle.size(), " bytes");
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
        return c10::str("opcode ", hex, " at byte ", start, " is not a pickle opcode");
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
        if (n - at < size_t(layout.size)) return c10::str("truncated length at byte ", start);
        uint64_t length = 0;
        for (int i = layout.size - 1; i >= 0; --i)
          length = length << 8 | uint8_t(pickle[at + size_t(i)]);
        at += size_t(layout.size);
        if (length > n - at) {
          return c10::str("a length of ", length, " at byte ", start, " runs past the end (", n,
                          " bytes)");
        }
        at += size_t(length);
        break;
      }
      case Arg::kLine:
      case Arg::kTwoLines:
        for (int line = 0; line < (layout.arg == Arg::kLine ? 1 : 2); ++line) {
          const size_t end = pickle.find('\n', at);
          if (end == std::string::npos) return c10::str("unterminated line at byte ", start);
          at = end + 1;
        }
        break;
    }
    if (at > n) return c10::str("truncated argument at byte ", start);
  }
  return "no STOP";
}

}  // namespace ddp

// A check of a pickle's framing before LibTorch's unpickler sees it. LibTorch 1.13's Unpickler
// reserves whatever a length field says (BINUNICODE, BINBYTES, FRAME, ...) before reading, so a
// forged 4-byte length makes it allocate gigabytes (found by fuzz/checkpoint_fuzz.cpp). This
// walks the opcodes once and rejects any argument that runs past the end of the data, and any
// memo id (LONG_BINPUT) that would make the unpickler's memo larger than the data.
#pragma once

#include <string>

namespace ddp {

/// "" when every opcode up to STOP has its arguments inside `pickle`; otherwise what is wrong
/// ("a length of 4294967044 at byte 37 runs past the end (1035 bytes)", "opcode 0xff at byte 3
/// is not a pickle opcode", "a memo id of 1157627904 at byte 3 is beyond the pickle's 9 bytes",
/// "no STOP").
std::string pickle_framing_problem(const std::string& pickle);

}  // namespace ddp

#include "report/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>

#include <c10/util/StringUtil.h>

#include "ddp/atomic_file.h"
#include "ddp/error.h"
#include "ddp_build_config.h"

#if defined(DDP_HAVE_TENSORBOARD)
#include "tensorboard_event.pb.h"
#endif

namespace ddp::train {

uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;  // reflected
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xffffffffu;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

#if !defined(DDP_HAVE_TENSORBOARD)

namespace {
const char* kNotBuilt =
    "this ddp-train was built without TensorBoard event files (DDP_WITH_TENSORBOARD=OFF; "
    "Debian: libprotobuf-dev, protobuf-compiler)";
}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  throw InvalidArgument(c10::str("--tensorboard ", dir, ": ", kNotBuilt));
}
void TensorBoardWriter::scalar(const std::string&, double, int64_t) {}
void TensorBoardWriter::write_record(const std::string&) {}
std::vector<ScalarEvent> read_events(const std::string& path) {
  throw InvalidArgument(c10::str("cannot read ", path, ": ", kNotBuilt));
}

#else

namespace {

constexpr uint32_t kMaskDelta = 0xa282ead8u;

// TFRecord stores CRCs masked, so that a CRC of data that holds CRCs stays well distributed.
uint32_t masked_crc(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

double seconds_since_epoch() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
uint64_t get_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | uint8_t(p[i]);
  return v;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  make_directories(dir);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = c10::str(dir, "/events.out.tfevents.", int64_t(seconds_since_epoch()), ".", host, ".",
                   ::getpid());
  created_.emplace(path_);
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_)
    throw IoError(c10::str("--tensorboard: cannot write ", path_, ": ", std::strerror(errno)));
  tensorboard::Event first;
  first.set_wall_time(seconds_since_epoch());
  first.set_file_version("brain.Event:2");
  write_record(first.SerializeAsString());
}

void TensorBoardWriter::scalar(const std::string& tag, double value, int64_t step) {
  tensorboard::Event event;
  event.set_wall_time(seconds_since_epoch());
  event.set_step(step);
  tensorboard::SummaryValue* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(float(value));
  write_record(event.SerializeAsString());
  created_->wrote();
}

void TensorBoardWriter::write_record(const std::string& bytes) {
  std::string header;
  put_u64(header, bytes.size());
  std::string record = header;
  put_u32(record, masked_crc(header.data(), header.size()));
  record += bytes;
  put_u32(record, masked_crc(bytes.data(), bytes.size()));
  out_.write(record.data(), std::streamsize(record.size()));
  out_.flush();  // TensorBoard reads the file while it grows
  if (!out_) throw IoError(c10::str("--tensorboard: writing ", path_, " failed (disk full?)"));
}

std::vector<ScalarEvent> read_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(c10::str(path, ": cannot read it"));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<ScalarEvent> scalars;
  size_t at = 0;
  for (int record = 0; at < bytes.size(); ++record) {
    auto bad = [&](const char* what) {
      return DataError(c10::str(path, ": record ", record, " at byte ", at, ": ", what));
    };
    if (bytes.size() - at < 12) throw bad("truncated header");
    const uint64_t length = get_le(&bytes[at], 8);
    if (uint32_t(get_le(&bytes[at + 8], 4)) != masked_crc(&bytes[at], 8)) {
      throw bad("length checksum does not match");
    }
    if (bytes.size() - at - 12 < length + 4) throw bad("truncated data");
    const char* data = &bytes[at + 12];
    if (uint32_t(get_le(data + length, 4)) != masked_crc(data, length)) {
      throw bad("data checksum does not match");
    }
    tensorboard::Event event;
    if (!event.ParseFromArray(data, int(length))) throw bad("not an Event message");
    for (const auto& v : event.summary().value()) {
      scalars.push_back({v.tag(), event.step(), v.simple_value(), event.wall_time()});
    }
    at += 12 + length + 4;
  }
  return scalars;
}

#endif  // DDP_HAVE_TENSORBOARD

}  // namespace ddp::train

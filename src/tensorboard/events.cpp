// TFRecord framing, Event protobufs and the event-file writer and reader (normlab/tensorboard.h).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <boost/crc.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "event.pb.h"
#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/tensorboard.h"

namespace normlab {

namespace fs = std::filesystem;

namespace {

// CRC-32C (Castagnoli): polynomial 0x1EDC6F41, reflected, initial and final XOR all ones.
using Crc32c = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

constexpr const char* kFileVersion = "brain.Event:2";

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string framed(const tb::Event& e) {
  std::string payload;
  NL_CHECK(e.SerializeToString(&payload), "an Event did not serialize");
  return tfrecord(payload);
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == 0) return "localhost";
  std::string h = buf;
  // The host is part of a file name: nothing that would make it two names.
  for (char& c : h)
    if (c == '/' || c == ' ') c = '_';
  return h;
}


}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  Crc32c crc;
  crc.process_bytes(data, n);
  return crc.checksum();
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(const std::string& payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  put_le(out, payload.size(), 8);
  put_le(out, masked_crc32c(out.data(), 8), 4);
  out += payload;
  put_le(out, masked_crc32c(payload.data(), payload.size()), 4);
  return out;
}

std::string version_event(double wall_time, const std::string& writer) {
  tb::Event e;
  e.set_wall_time(wall_time);
  e.set_file_version(kFileVersion);
  e.mutable_source_metadata()->set_writer(writer);
  return framed(e);
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<TbScalar>& scalars) {
  tb::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  tb::Summary* s = e.mutable_summary();
  for (const TbScalar& v : scalars) {
    tb::Summary::Value* value = s->add_value();
    value->set_tag(v.tag);
    value->set_simple_value(static_cast<float>(v.value));
  }
  return framed(e);
}

std::string text_event(double wall_time, int64_t step, const std::string& tag, const std::string& markdown) {
  tb::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  tb::Summary::Value* value = e.mutable_summary()->add_value();
  value->set_tag(tag);
  // TensorBoard's text plugin: a rank-0 string tensor whose metadata names the plugin.
  tb::SummaryMetadata* meta = value->mutable_metadata();
  meta->mutable_plugin_data()->set_plugin_name("text");
  meta->set_data_class(2);  // DATA_CLASS_TENSOR
  tb::TensorProto* t = value->mutable_tensor();
  t->set_dtype(7);  // DT_STRING
  t->mutable_tensor_shape();
  t->add_string_val(markdown);
  return framed(e);
}

// ---- the writer -------------------------------------------------------------------------------

EventWriter::EventWriter(const std::string& dir, const std::string& writer) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  NL_USAGE(!ec, "cannot create '{}': {}", shown(dir, 200), ec.message());
  NL_USAGE(fs::is_directory(dir, ec), "'{}' is not a directory", shown(dir, 200));
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string stem = fmt::format("{}/events.out.tfevents.{}.{}.{}", dir, static_cast<long long>(now), host_name(), getpid());
  // Two writers of one process in one second (a test; a sweep's children differ by pid) get
  // different names: O_EXCL never replaces a file.
  for (int n = 0; fd_ < 0; ++n) {
    path_ = fmt::format("{}.{}", stem, n);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    NL_USAGE(fd_ >= 0 || (errno == EEXIST && n < 1000), "cannot write '{}': {}", shown(path_, 200), std::strerror(errno));
  }
  try {
    append(version_event(now, writer));
  } catch (...) {
    // Not even its first record fits (a full disk): the empty file this made goes, and its
    // descriptor with it, since no destructor runs for an object never made.
    ::close(fd_);
    ::unlink(path_.c_str());
    throw;
  }
}

EventWriter::~EventWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void EventWriter::append(const std::string& framed_events) {
  NL_USAGE(fd_ >= 0, "writing '{}' failed: closed", shown(path_, 200));
  const off_t end = ::lseek(fd_, 0, SEEK_END);
  if (write_all(fd_, framed_events)) return;
  const int e = errno;
  // A short write (the disk filled, the file-size limit) left part of a record: the file is cut
  // back to its last whole record, so that it stays readable to its end.
  const bool whole = end >= 0 && ::ftruncate(fd_, end) == 0 && ::lseek(fd_, end, SEEK_SET) == end;
  throw UsageError(fmt::format("writing '{}' failed: {}{}", shown(path_, 200), std::strerror(e),
                               whole ? "" : "; its last record may be torn"));
}

void EventWriter::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  NL_USAGE(::close(fd) == 0, "writing '{}' failed: {}", shown(path_, 200), std::strerror(errno));
}

// ---- the reader -------------------------------------------------------------------------------

std::vector<TbEvent> read_event_file(const std::string& path) {
  const std::string data = read_file(path);
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  std::vector<TbEvent> out;
  size_t at = 0;
  for (size_t record = 1; at < data.size(); ++record) {
    auto bad = [&](const std::string& what) {
      return UsageError(fmt::format("'{}': record {} (byte {}): {}", shown(path, 200), record, at, what));
    };
    if (data.size() - at < 12) throw bad("torn: the file ends inside the record's header");
    const uint64_t len = get_le(p + at, 8);
    if (static_cast<uint32_t>(get_le(p + at + 8, 4)) != masked_crc32c(p + at, 8)) throw bad("the length's CRC does not match");
    if (len > data.size() - at - 12 || data.size() - at - 12 - len < 4) throw bad("torn: the file ends inside the record");
    const unsigned char* payload = p + at + 12;
    if (static_cast<uint32_t>(get_le(payload + len, 4)) != masked_crc32c(payload, len)) throw bad("the data's CRC does not match");
    tb::Event e;
    if (!e.ParseFromArray(payload, static_cast<int>(len))) throw bad("not an Event protobuf");
    TbEvent ev;
    ev.wall_time = e.wall_time();
    ev.step = e.step();
    if (e.has_file_version()) {
      ev.file_version = e.file_version();
      ev.writer = e.source_metadata().writer();
    }
    if (e.has_summary())
      for (const tb::Summary::Value& v : e.summary().value()) {
        if (v.has_simple_value()) ev.scalars.push_back({v.tag(), static_cast<double>(v.simple_value())});
        else if (v.has_tensor() && v.tensor().string_val_size() == 1) ev.texts.emplace_back(v.tag(), v.tensor().string_val(0));
      }
    out.push_back(std::move(ev));
    at += 12 + len + 4;
  }
  return out;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().find("tfevents") != std::string::npos) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace normlab

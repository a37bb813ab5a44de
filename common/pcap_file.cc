#include "common/pcap_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

namespace uroce {
namespace {

// File header magic numbers, as read in the writer's byte order.
constexpr uint32_t kMagicMicroseconds = 0xA1B2C3D4;
constexpr uint32_t kMagicNanoseconds = 0xA1B23C4D;
constexpr uint32_t kMagicPcapng = 0x0A0D0D0A;  // a pcapng section header block
constexpr size_t kFileHeaderBytes = 24;
constexpr size_t kRecordHeaderBytes = 16;
// Larger than any Ethernet frame with jumbo MTU; bounds a hostile length.
constexpr uint32_t kMaxRecordBytes = 256 * 1024;

uint32_t Swap32(uint32_t v) { return __builtin_bswap32(v); }

}  // namespace

bool PcapReader::host_big_endian() {
  const uint16_t probe = 1;
  uint8_t first;
  std::memcpy(&first, &probe, 1);
  return first == 0;
}

uint32_t PcapReader::Load32(size_t at) const {
  uint32_t v;
  std::memcpy(&v, bytes_.data() + at, 4);
  return swapped_ ? Swap32(v) : v;
}

StatusOr<PcapReader> PcapReader::Open(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open: " + std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return IoError(path + ": read error");
  return FromBytes(std::move(bytes), path);
}

StatusOr<PcapReader> PcapReader::FromBytes(std::vector<uint8_t> bytes, const std::string& name) {
  PcapReader r;
  r.name_ = name;
  r.bytes_ = std::move(bytes);
  if (r.bytes_.size() < 4) return InvalidArgument(name + ": not a pcap file (shorter than a pcap header)");
  uint32_t magic;
  std::memcpy(&magic, r.bytes_.data(), 4);
  if (magic == kMagicMicroseconds || magic == kMagicNanoseconds) {
    r.swapped_ = false;
  } else if (Swap32(magic) == kMagicMicroseconds || Swap32(magic) == kMagicNanoseconds) {
    r.swapped_ = true;
    magic = Swap32(magic);
  } else if (magic == kMagicPcapng) {
    return InvalidArgument(name + ": pcapng is not supported; convert it with `editcap -F pcap`");
  } else {
    return InvalidArgument(name + ": not a pcap file (bad magic number)");
  }
  r.nanosecond_ = magic == kMagicNanoseconds;
  if (r.bytes_.size() < kFileHeaderBytes) return InvalidArgument(name + ": truncated pcap file header");
  uint16_t version_major;
  std::memcpy(&version_major, r.bytes_.data() + 4, 2);
  if (r.swapped_) version_major = __builtin_bswap16(version_major);
  if (version_major != 2) {
    return InvalidArgument(name + ": unsupported pcap version " + std::to_string(version_major));
  }
  r.snap_length_ = r.Load32(16);
  // The link type is the low 16 bits; the upper bits may carry FCS flags.
  const uint32_t link_type = r.Load32(20) & 0xFFFF;
  if (link_type != kPcapLinkTypeEthernet) {
    return InvalidArgument(name + ": link type " + std::to_string(link_type) + " is not Ethernet (1)");
  }
  r.offset_ = kFileHeaderBytes;
  return r;
}

StatusOr<bool> PcapReader::Next(PcapRecord* record) {
  if (offset_ == bytes_.size()) return false;
  const std::string where = name_ + ": record " + std::to_string(records_ + 1);
  if (bytes_.size() - offset_ < kRecordHeaderBytes) return InvalidArgument(where + ": truncated record header");
  const uint32_t seconds = Load32(offset_);
  const uint32_t fraction = Load32(offset_ + 4);
  const uint32_t captured = Load32(offset_ + 8);
  const uint32_t original = Load32(offset_ + 12);
  if (captured > kMaxRecordBytes) {
    return InvalidArgument(where + ": implausible captured length " + std::to_string(captured));
  }
  if (bytes_.size() - offset_ - kRecordHeaderBytes < captured) {
    return InvalidArgument(where + ": truncated (the file ends inside the frame)");
  }
  record->timestamp_ns = uint64_t{seconds} * 1000000000u + (nanosecond_ ? fraction : uint64_t{fraction} * 1000u);
  record->captured_length = captured;
  record->original_length = original;
  record->data = bytes_.data() + offset_ + kRecordHeaderBytes;
  offset_ += kRecordHeaderBytes + captured;
  ++records_;
  return true;
}

StatusOr<PcapWriter> PcapWriter::Create(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return IoError(path + ": cannot create: " + std::strerror(errno));
  PcapWriter w(f, path);
  uint8_t header[kFileHeaderBytes] = {};
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) header[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  put32(0, kMagicMicroseconds);
  header[4] = 2;  // version 2.4, little-endian
  header[6] = 4;
  put32(16, kMaxRecordBytes);
  put32(20, kPcapLinkTypeEthernet);
  if (std::fwrite(header, 1, sizeof(header), f) != sizeof(header)) return IoError(path + ": write failed");
  return w;
}

PcapWriter::PcapWriter(PcapWriter&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)), path_(std::move(other.path_)) {}

PcapWriter& PcapWriter::operator=(PcapWriter&& other) noexcept {
  if (this != &other) {
    (void)Close();
    file_ = std::exchange(other.file_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

PcapWriter::~PcapWriter() { (void)Close(); }

Status PcapWriter::Write(const uint8_t* frame, size_t length, uint64_t timestamp_ns) {
  if (file_ == nullptr) return FailedPrecondition(path_ + ": closed");
  if (length > kMaxRecordBytes) return InvalidArgument(path_ + ": frame too long for pcap");
  uint8_t header[kRecordHeaderBytes];
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) header[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  put32(0, static_cast<uint32_t>(timestamp_ns / 1000000000u));
  put32(4, static_cast<uint32_t>(timestamp_ns % 1000000000u / 1000u));
  put32(8, static_cast<uint32_t>(length));
  put32(12, static_cast<uint32_t>(length));
  if (std::fwrite(header, 1, sizeof(header), file_) != sizeof(header) ||
      std::fwrite(frame, 1, length, file_) != length) {
    return IoError(path_ + ": write failed");
  }
  return Status::Ok();
}

Status PcapWriter::Close() {
  if (file_ == nullptr) return Status::Ok();
  const bool ok = std::fclose(file_) == 0;
  file_ = nullptr;
  return ok ? Status::Ok() : IoError(path_ + ": close failed");
}

}  // namespace uroce

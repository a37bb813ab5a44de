// Classic pcap files (the libpcap format, not pcapng): a reader for `uroce
// dump` and the capture tests, and a writer for frames uroce builds.
//
// The reader takes little- and big-endian files, with microsecond or
// nanosecond timestamps. A file that is missing, not pcap, of a link type
// other than Ethernet, or cut short is an error that says which. Reference:
// the libpcap file format (draft-ietf-opsawg-pcap).
//
// Control path (files, allocation). Thread-safety: one object per thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/status.h"

namespace uroce {

// LINKTYPE_ETHERNET: the only link type uroce reads and writes.
constexpr uint32_t kPcapLinkTypeEthernet = 1;

// One captured frame. `data` points into the reader and stays valid while it
// lives.
struct PcapRecord {
  uint64_t timestamp_ns = 0;
  uint32_t original_length = 0;  // on the wire; captured_length may be less (snaplen)
  uint32_t captured_length = 0;
  const uint8_t* data = nullptr;
};

class PcapReader {
 public:
  // Reads the whole file. Fails with kNotFound if it cannot be opened and
  // kInvalidArgument if it is not a classic pcap file of Ethernet frames.
  static StatusOr<PcapReader> Open(const std::string& path);
  // The same from bytes in memory; `name` is for messages.
  static StatusOr<PcapReader> FromBytes(std::vector<uint8_t> bytes, const std::string& name);

  // The next record: true and *record filled, false at the clean end of the
  // file, or an error if the file ends inside a record.
  StatusOr<bool> Next(PcapRecord* record);

  bool nanosecond_timestamps() const { return nanosecond_; }
  bool big_endian() const { return swapped_ != host_big_endian(); }
  uint32_t snap_length() const { return snap_length_; }

 private:
  PcapReader() = default;
  static bool host_big_endian();
  uint32_t Load32(size_t at) const;

  std::string name_;
  std::vector<uint8_t> bytes_;
  size_t offset_ = 0;
  bool swapped_ = false;
  bool nanosecond_ = false;
  uint32_t snap_length_ = 0;
  uint64_t records_ = 0;
};

// Writes a little-endian, microsecond pcap of Ethernet frames.
class PcapWriter {
 public:
  static StatusOr<PcapWriter> Create(const std::string& path);
  PcapWriter(PcapWriter&& other) noexcept;
  PcapWriter& operator=(PcapWriter&& other) noexcept;
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;
  ~PcapWriter();

  Status Write(const uint8_t* frame, size_t length, uint64_t timestamp_ns);
  Status Close();

 private:
  PcapWriter(FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace uroce

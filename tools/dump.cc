// `uroce dump FILE.pcap [--json]`: decodes every RoCEv2 frame of a classic
// pcap file with uroce's own parser, checks its ICRC, and prints one line per
// frame (or one JSON object per line with --json), then a summary:
//
//   frames N, roce N, icrc_ok N, icrc_bad N, malformed N
//
// (with --json the summary is a JSON object of the same five counts). A RoCE
// frame is one sent to UDP port 4791; frames that are not are counted and
// skipped. Exit status: 0 when every RoCE frame parsed and its ICRC was
// right, 1 when some did not, 2 when the file cannot be read as pcap
// (missing, not pcap, truncated) or the command line is wrong.
#include <arpa/inet.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/pcap_file.h"
#include "tools/command.h"
#include "transport/headers.h"
#include "transport/opcode.h"
#include "transport/packet_parser.h"

namespace uroce::tools {
namespace {

using transport::AethFields;
using transport::AethKind;
using transport::Gid;
using transport::MacAddress;
using transport::PacketView;
using transport::ParseError;

constexpr char kUsage[] =
    "usage: uroce dump FILE.pcap [--json]\n"
    "  decodes every RoCEv2 frame of a classic pcap file (tcpdump -w, tshark -F pcap) with\n"
    "  uroce's parser and checks its ICRC: one line per frame, then the counts; --json: one\n"
    "  JSON object per frame and one of the counts. Exit 0 when every RoCE frame parsed with\n"
    "  a right ICRC, 1 otherwise, 2 when the file is missing, not pcap or truncated.\n";

std::string FormatGid(const Gid& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  if (transport::IsIpv4MappedGid(gid)) {
    inet_ntop(AF_INET, gid.data() + 12, text, sizeof(text));
  } else {
    inet_ntop(AF_INET6, gid.data(), text, sizeof(text));
  }
  return text;
}

std::string FormatMac(const MacAddress& mac) {
  char text[18];
  std::snprintf(text, sizeof(text), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3], mac[4],
                mac[5]);
  return text;
}

std::string Hex(uint64_t v) {
  char text[19];
  std::snprintf(text, sizeof(text), "0x%" PRIx64, v);
  return text;
}

// The kind of acknowledgement, with the NAK code spelled out (IBTA table 43).
std::string AethKindName(const AethFields& aeth) {
  switch (aeth.kind()) {
    case AethKind::kAck: return "ACK";
    case AethKind::kRnrNak: return "RNR NAK";
    case AethKind::kReserved: return "reserved";
    case AethKind::kNak:
      switch (aeth.value()) {
        case 0: return "NAK PSN sequence error";
        case 1: return "NAK invalid request";
        case 2: return "NAK remote access error";
        case 3: return "NAK remote operational error";
        case 4: return "NAK invalid RD request";
        default: return "NAK reserved code";
      }
  }
  return "?";
}

// IBTA tables 42 and 43 in words: "ACK credits 31", "RNR NAK timer 14",
// "NAK PSN sequence error", ...
std::string AethText(const AethFields& aeth) {
  switch (aeth.kind()) {
    case AethKind::kAck: return "ACK credits " + std::to_string(aeth.value());
    case AethKind::kRnrNak: return "RNR NAK timer " + std::to_string(aeth.value());
    default: return AethKindName(aeth);
  }
}

struct Counts {
  uint64_t frames = 0;
  uint64_t roce = 0;
  uint64_t icrc_ok = 0;
  uint64_t icrc_bad = 0;
  uint64_t malformed = 0;
};

// "10.77.0.2:49441 > 10.77.0.3:4791"
std::string Endpoints(const PacketView& v) {
  return FormatGid(v.fields.src_gid) + ":" + std::to_string(v.fields.udp_src_port) + " > " +
         FormatGid(v.fields.dst_gid) + ":" + std::to_string(v.fields.udp_dst_port);
}

// An ATOMIC WRITE's 8 bytes (IBTA 1.5, 9.4.7), in the order they travel and
// land in memory: 16 hex digits.
std::string AtomicWriteData(const PacketView& v) {
  char out[17];
  for (int i = 0; i < 8; ++i) std::snprintf(out + 2 * i, 3, "%02x", v.payload[i]);
  return out;
}

void PrintText(uint64_t number, ParseError error, const PacketView& v) {
  std::string line = std::to_string(number) + "  ";
  if (!v.is_roce) {
    std::printf("%snot RoCEv2, skipped\n", line.c_str());
    return;
  }
  line += Endpoints(v);
  const bool decoded = error == ParseError::kOk || error == ParseError::kBadIcrc;
  if (!decoded) {
    std::printf("%s  malformed: %s\n", line.c_str(), transport::ParseErrorName(error));
    return;
  }
  const auto& f = v.fields;
  // A frame with a bad ICRC is decoded as far as it goes; its opcode may be
  // one of the things the damage changed.
  const auto& op = v.opcode ? *v.opcode : transport::LookupOpcode(f.bth.opcode);
  char head[160];
  std::snprintf(head, sizeof(head), "  %s  qp 0x%06x  psn %u  A=%d  len %u",
                op.valid ? op.name : ("opcode " + Hex(f.bth.opcode)).c_str(), f.bth.dest_qp, f.bth.psn.value(),
                f.bth.ack_request ? 1 : 0, f.payload_length);
  line += head;
  if (op.has(transport::kXrcEth)) line += "  xrceth srq " + Hex(f.xrc_srqn);
  if (op.has(transport::kDeth)) {
    line += "  deth qkey " + Hex(f.deth.qkey) + " src_qp " + Hex(f.deth.src_qp);
  }
  if (op.has(transport::kReth)) {
    line += "  reth va " + Hex(f.reth.virtual_address) + " rkey " + Hex(f.reth.rkey) + " dma_len " +
            std::to_string(f.reth.dma_length);
  }
  if (op.has(transport::kAtomicEth)) {
    line += "  atomic va " + Hex(f.atomic_eth.virtual_address) + " rkey " + Hex(f.atomic_eth.rkey) +
            (op.operation == transport::Operation::kCompareSwap ? " swap " : " add ") +
            Hex(f.atomic_eth.swap_or_add_data) + " compare " + Hex(f.atomic_eth.compare_data);
  }
  if (op.operation == transport::Operation::kAtomicWrite && f.payload_length == 8) {
    line += "  data " + AtomicWriteData(v);
  }
  if (op.has(transport::kAeth)) {
    line += "  aeth " + AethText(f.aeth) + " msn " + std::to_string(f.aeth.msn);
  }
  if (op.has(transport::kAtomicAckEth)) line += "  original " + Hex(f.atomic_ack_eth.original_remote_data);
  if (op.has(transport::kImmDt)) line += "  imm " + Hex(f.immediate_data);
  if (op.has(transport::kIeth)) line += "  invalidate rkey " + Hex(f.invalidate_rkey);
  if (error == ParseError::kOk) {
    line += "  icrc ok";
  } else {
    line += "  icrc BAD (carries " + Hex(v.icrc_stored) + ", computed " + Hex(v.icrc_computed) + ")";
  }
  std::printf("%s\n", line.c_str());
}

// One JSON object. 64-bit values are hex strings (JSON readers often keep
// only 53 bits of a number); everything else is a number.
void PrintJson(uint64_t number, ParseError error, const PacketView& v) {
  std::string j = "{\"frame\":" + std::to_string(number) + ",\"roce\":" + (v.is_roce ? "true" : "false");
  if (!v.is_roce) {
    std::printf("%s}\n", j.c_str());
    return;
  }
  const auto& f = v.fields;
  auto str = [](const std::string& s) { return "\"" + s + "\""; };
  j += ",\"src_mac\":" + str(FormatMac(f.src_mac)) + ",\"dst_mac\":" + str(FormatMac(f.dst_mac));
  if (f.has_vlan) j += ",\"vlan_tci\":" + std::to_string(f.vlan_tci);
  j += ",\"ip_version\":" + std::to_string(static_cast<int>(f.ip_version));
  j += ",\"src\":" + str(FormatGid(f.src_gid)) + ",\"dst\":" + str(FormatGid(f.dst_gid));
  j += ",\"udp_src_port\":" + std::to_string(f.udp_src_port) + ",\"udp_dst_port\":" + std::to_string(f.udp_dst_port);
  const bool decoded = error == ParseError::kOk || error == ParseError::kBadIcrc;
  if (!decoded) {
    j += ",\"error\":" + str(transport::ParseErrorName(error));
    std::printf("%s}\n", j.c_str());
    return;
  }
  const auto& op = v.opcode ? *v.opcode : transport::LookupOpcode(f.bth.opcode);
  j += ",\"opcode\":" + std::to_string(f.bth.opcode) + ",\"opcode_name\":" + str(op.name);
  j += ",\"dest_qp\":" + std::to_string(f.bth.dest_qp) + ",\"psn\":" + std::to_string(f.bth.psn.value());
  j += std::string(",\"ack_request\":") + (f.bth.ack_request ? "true" : "false");
  j += std::string(",\"solicited_event\":") + (f.bth.solicited_event ? "true" : "false");
  j += ",\"pkey\":" + std::to_string(f.bth.pkey) + ",\"pad_count\":" + std::to_string(f.bth.pad_count);
  j += ",\"payload_length\":" + std::to_string(f.payload_length);
  if (op.has(transport::kDeth)) {
    j += ",\"deth\":{\"qkey\":" + std::to_string(f.deth.qkey) + ",\"src_qp\":" + std::to_string(f.deth.src_qp) + "}";
  }
  if (op.has(transport::kReth)) {
    j += ",\"reth\":{\"va\":" + str(Hex(f.reth.virtual_address)) + ",\"rkey\":" + std::to_string(f.reth.rkey) +
         ",\"dma_length\":" + std::to_string(f.reth.dma_length) + "}";
  }
  if (op.has(transport::kAtomicEth)) {
    j += ",\"atomic_eth\":{\"va\":" + str(Hex(f.atomic_eth.virtual_address)) +
         ",\"rkey\":" + std::to_string(f.atomic_eth.rkey) +
         ",\"swap_or_add\":" + str(Hex(f.atomic_eth.swap_or_add_data)) +
         ",\"compare\":" + str(Hex(f.atomic_eth.compare_data)) + "}";
  }
  if (op.operation == transport::Operation::kAtomicWrite && f.payload_length == 8) {
    j += ",\"atomic_write_data\":" + str(AtomicWriteData(v));
  }
  if (op.has(transport::kAeth)) {
    j += ",\"aeth\":{\"syndrome\":" + std::to_string(f.aeth.syndrome) + ",\"kind\":" + str(AethKindName(f.aeth)) +
         ",\"msn\":" + std::to_string(f.aeth.msn) + "}";
  }
  if (op.has(transport::kAtomicAckEth)) {
    j += ",\"atomic_ack_eth\":{\"original\":" + str(Hex(f.atomic_ack_eth.original_remote_data)) + "}";
  }
  if (op.has(transport::kImmDt)) j += ",\"immediate_data\":" + std::to_string(f.immediate_data);
  if (op.has(transport::kIeth)) j += ",\"invalidate_rkey\":" + std::to_string(f.invalidate_rkey);
  // The ICRC as the packet carries it, read least-significant byte first
  // (Wireshark shows the same four bytes read the other way).
  j += ",\"icrc\":" + str(error == ParseError::kOk ? "ok" : "bad") + ",\"icrc_value\":" + std::to_string(v.icrc_stored);
  if (error != ParseError::kOk) j += ",\"icrc_computed\":" + std::to_string(v.icrc_computed);
  std::printf("%s}\n", j.c_str());
}

}  // namespace

int DumpUsage(FILE* out) {
  std::fputs(kUsage, out);
  return out == stdout ? 0 : 2;
}

int DumpCommand(int argc, char** argv) {
  const char* path = nullptr;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json")) {
      json = true;
    } else if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
      std::fprintf(stderr, "uroce dump: unknown option '%s'\n%s", argv[i], kUsage);
      return 2;
    } else if (path == nullptr) {
      path = argv[i];
    } else {
      std::fprintf(stderr, "uroce dump: one file at a time\n%s", kUsage);
      return 2;
    }
  }
  if (path == nullptr) {
    std::fputs(kUsage, stderr);
    return 2;
  }

  auto reader = PcapReader::Open(path);
  if (!reader.ok()) {
    std::fprintf(stderr, "uroce dump: %s\n", reader.status().message().c_str());
    return 2;
  }
  Counts counts;
  PcapRecord record;
  while (true) {
    auto more = reader->Next(&record);
    if (!more.ok()) {
      std::fflush(stdout);
      std::fprintf(stderr, "uroce dump: %s\n", more.status().message().c_str());
      return 2;
    }
    if (!*more) break;
    ++counts.frames;
    PacketView view;
    const ParseError error = transport::ParsePacket(record.data, record.captured_length, transport::ParseOptions{},
                                                    &view);
    if (view.is_roce) {
      ++counts.roce;
      if (error == ParseError::kOk) {
        ++counts.icrc_ok;
      } else if (error == ParseError::kBadIcrc) {
        ++counts.icrc_bad;
      } else {
        ++counts.malformed;
      }
    }
    (json ? PrintJson : PrintText)(counts.frames, error, view);
  }
  if (json) {
    std::printf("{\"frames\":%" PRIu64 ",\"roce\":%" PRIu64 ",\"icrc_ok\":%" PRIu64 ",\"icrc_bad\":%" PRIu64
                ",\"malformed\":%" PRIu64 "}\n",
                counts.frames, counts.roce, counts.icrc_ok, counts.icrc_bad, counts.malformed);
  } else {
    std::printf("frames %" PRIu64 ", roce %" PRIu64 ", icrc_ok %" PRIu64 ", icrc_bad %" PRIu64 ", malformed %" PRIu64
                "\n",
                counts.frames, counts.roce, counts.icrc_ok, counts.icrc_bad, counts.malformed);
  }
  return counts.icrc_bad == 0 && counts.malformed == 0 ? 0 : 1;
}

}  // namespace uroce::tools

#include "cm/cm_mad.h"

#include <cstring>
#include <type_traits>

#include "transport/wire_types.h"

namespace uroce::cm {

using transport::Gid;
using transport::Ipv4MappedGid;
using transport::IsIpv4MappedGid;
using transport::LoadBe16;
using transport::LoadBe24;
using transport::LoadBe32;
using transport::LoadBe64;
using transport::StoreBe16;
using transport::StoreBe24;
using transport::StoreBe32;
using transport::StoreBe64;

namespace {

// Offsets below are from the start of the CM message (the MAD's data, 24
// bytes into the MAD), as IBTA 12.6 lists them.

template <size_t N>
void CopyIn(std::array<uint8_t, N>& to, const uint8_t* from) {
  std::memcpy(to.data(), from, N);
}
template <size_t N>
void CopyOut(uint8_t* to, const std::array<uint8_t, N>& from) {
  std::memcpy(to, from.data(), N);
}

Gid LoadGid(const uint8_t* p) {
  Gid g;
  std::memcpy(g.data(), p, 16);
  return g;
}

// A path: 44 bytes (IBTA 12.6.5, bytes 52..95 for the primary one).
void DecodePath(const uint8_t* p, CmPath* out) {
  out->local_lid = LoadBe16(p);
  out->remote_lid = LoadBe16(p + 2);
  out->local_gid = LoadGid(p + 4);
  out->remote_gid = LoadGid(p + 20);
  const uint32_t word = LoadBe32(p + 36);
  out->flow_label = word >> 12;
  out->packet_rate = word & 0x3F;
  out->traffic_class = p[40];
  out->hop_limit = p[41];
  out->sl = p[42] >> 4;
  out->subnet_local = (p[42] >> 3) & 1;
  out->local_ack_timeout = p[43] >> 3;
}

void EncodePath(const CmPath& path, uint8_t* p) {
  StoreBe16(p, path.local_lid);
  StoreBe16(p + 2, path.remote_lid);
  std::memcpy(p + 4, path.local_gid.data(), 16);
  std::memcpy(p + 20, path.remote_gid.data(), 16);
  StoreBe32(p + 36, ((path.flow_label & 0xFFFFF) << 12) | (path.packet_rate & 0x3F));
  p[40] = path.traffic_class;
  p[41] = path.hop_limit;
  p[42] = static_cast<uint8_t>(((path.sl & 0xF) << 4) | (path.subnet_local ? 0x08 : 0));
  p[43] = static_cast<uint8_t>((path.local_ack_timeout & 0x1F) << 3);
}

CmMadError DecodeReq(const uint8_t* m, CmReq* r) {
  r->local_comm_id = LoadBe32(m);
  r->service_id = LoadBe64(m + 8);
  r->local_ca_guid = LoadBe64(m + 16);
  r->local_qkey = LoadBe32(m + 28);
  r->local_qpn = LoadBe24(m + 32);
  r->responder_resources = m[35];
  r->local_eecn = LoadBe24(m + 36);
  r->initiator_depth = m[39];
  r->remote_eecn = LoadBe24(m + 40);
  r->remote_cm_response_timeout = m[43] >> 3;
  r->transport_service_type = (m[43] >> 1) & 3;
  r->end_to_end_flow_control = m[43] & 1;
  r->starting_psn = LoadBe24(m + 44);
  r->local_cm_response_timeout = m[47] >> 3;
  r->retry_count = m[47] & 7;
  r->partition_key = LoadBe16(m + 48);
  r->path_mtu = m[50] >> 4;
  r->rdc_exists = (m[50] >> 3) & 1;
  r->rnr_retry_count = m[50] & 7;
  r->max_cm_retries = m[51] >> 4;
  r->srq = (m[51] >> 3) & 1;
  r->extended_transport_type = m[51] & 7;
  DecodePath(m + 52, &r->primary);
  DecodePath(m + 96, &r->alternate);
  CopyIn(r->private_data, m + 140);
  return CmMadError::kOk;
}

void EncodeReq(const CmReq& r, uint8_t* m) {
  StoreBe32(m, r.local_comm_id);
  StoreBe64(m + 8, r.service_id);
  StoreBe64(m + 16, r.local_ca_guid);
  StoreBe32(m + 28, r.local_qkey);
  StoreBe24(m + 32, r.local_qpn & 0xFFFFFF);
  m[35] = r.responder_resources;
  StoreBe24(m + 36, r.local_eecn & 0xFFFFFF);
  m[39] = r.initiator_depth;
  StoreBe24(m + 40, r.remote_eecn & 0xFFFFFF);
  m[43] = static_cast<uint8_t>(((r.remote_cm_response_timeout & 0x1F) << 3) |
                               ((r.transport_service_type & 3) << 1) | (r.end_to_end_flow_control ? 1 : 0));
  StoreBe24(m + 44, r.starting_psn & 0xFFFFFF);
  m[47] = static_cast<uint8_t>(((r.local_cm_response_timeout & 0x1F) << 3) | (r.retry_count & 7));
  StoreBe16(m + 48, r.partition_key);
  m[50] = static_cast<uint8_t>(((r.path_mtu & 0xF) << 4) | (r.rdc_exists ? 0x08 : 0) | (r.rnr_retry_count & 7));
  m[51] = static_cast<uint8_t>(((r.max_cm_retries & 0xF) << 4) | (r.srq ? 0x08 : 0) |
                               (r.extended_transport_type & 7));
  EncodePath(r.primary, m + 52);
  EncodePath(r.alternate, m + 96);
  CopyOut(m + 140, r.private_data);
}

bool DecodeKind(uint8_t bits, CmMessageKind* kind) {
  if (bits > 2) return false;  // 3 is reserved (IBTA 12.6.6 / 12.6.7)
  *kind = static_cast<CmMessageKind>(bits);
  return true;
}

CmMadError DecodeMra(const uint8_t* m, CmMra* r) {
  r->local_comm_id = LoadBe32(m);
  r->remote_comm_id = LoadBe32(m + 4);
  if (!DecodeKind(m[8] >> 6, &r->message_mraed)) return CmMadError::kBadField;
  r->service_timeout = m[9] >> 3;
  CopyIn(r->private_data, m + 10);
  return CmMadError::kOk;
}

void EncodeMra(const CmMra& r, uint8_t* m) {
  StoreBe32(m, r.local_comm_id);
  StoreBe32(m + 4, r.remote_comm_id);
  m[8] = static_cast<uint8_t>((static_cast<uint8_t>(r.message_mraed) & 3) << 6);
  m[9] = static_cast<uint8_t>((r.service_timeout & 0x1F) << 3);
  CopyOut(m + 10, r.private_data);
}

CmMadError DecodeRej(const uint8_t* m, CmRej* r) {
  r->local_comm_id = LoadBe32(m);
  r->remote_comm_id = LoadBe32(m + 4);
  if (!DecodeKind(m[8] >> 6, &r->message_rejected)) return CmMadError::kBadField;
  r->reject_info_length = m[9] >> 1;
  if (r->reject_info_length > r->additional_info.size()) return CmMadError::kBadField;
  r->reason = LoadBe16(m + 10);
  CopyIn(r->additional_info, m + 12);
  CopyIn(r->private_data, m + 84);
  return CmMadError::kOk;
}

void EncodeRej(const CmRej& r, uint8_t* m) {
  StoreBe32(m, r.local_comm_id);
  StoreBe32(m + 4, r.remote_comm_id);
  m[8] = static_cast<uint8_t>((static_cast<uint8_t>(r.message_rejected) & 3) << 6);
  m[9] = static_cast<uint8_t>((r.reject_info_length & 0x7F) << 1);
  StoreBe16(m + 10, r.reason);
  CopyOut(m + 12, r.additional_info);
  CopyOut(m + 84, r.private_data);
}

CmMadError DecodeRep(const uint8_t* m, CmRep* r) {
  r->local_comm_id = LoadBe32(m);
  r->remote_comm_id = LoadBe32(m + 4);
  r->local_qkey = LoadBe32(m + 8);
  r->local_qpn = LoadBe24(m + 12);
  r->local_eecn = LoadBe24(m + 16);
  r->starting_psn = LoadBe24(m + 20);
  r->responder_resources = m[24];
  r->initiator_depth = m[25];
  r->target_ack_delay = m[26] >> 3;
  r->failover_accepted = (m[26] >> 1) & 3;
  r->end_to_end_flow_control = m[26] & 1;
  r->rnr_retry_count = m[27] >> 5;
  r->srq = (m[27] >> 4) & 1;
  r->local_ca_guid = LoadBe64(m + 28);
  CopyIn(r->private_data, m + 36);
  return CmMadError::kOk;
}

void EncodeRep(const CmRep& r, uint8_t* m) {
  StoreBe32(m, r.local_comm_id);
  StoreBe32(m + 4, r.remote_comm_id);
  StoreBe32(m + 8, r.local_qkey);
  StoreBe24(m + 12, r.local_qpn & 0xFFFFFF);
  StoreBe24(m + 16, r.local_eecn & 0xFFFFFF);
  StoreBe24(m + 20, r.starting_psn & 0xFFFFFF);
  m[24] = r.responder_resources;
  m[25] = r.initiator_depth;
  m[26] = static_cast<uint8_t>(((r.target_ack_delay & 0x1F) << 3) | ((r.failover_accepted & 3) << 1) |
                               (r.end_to_end_flow_control ? 1 : 0));
  m[27] = static_cast<uint8_t>(((r.rnr_retry_count & 7) << 5) | (r.srq ? 0x10 : 0));
  StoreBe64(m + 28, r.local_ca_guid);
  CopyOut(m + 36, r.private_data);
}

template <typename T>
CmMadError DecodeIds(const uint8_t* m, T* r, size_t private_offset) {
  r->local_comm_id = LoadBe32(m);
  r->remote_comm_id = LoadBe32(m + 4);
  CopyIn(r->private_data, m + private_offset);
  return CmMadError::kOk;
}

template <typename T>
void EncodeIds(const T& r, uint8_t* m, size_t private_offset) {
  StoreBe32(m, r.local_comm_id);
  StoreBe32(m + 4, r.remote_comm_id);
  CopyOut(m + private_offset, r.private_data);
}

}  // namespace

const char* CmMadErrorName(CmMadError error) {
  switch (error) {
    case CmMadError::kOk: return "ok";
    case CmMadError::kTooShort: return "too short";
    case CmMadError::kBadBaseVersion: return "bad base version";
    case CmMadError::kNotCmClass: return "not the CM class";
    case CmMadError::kBadClassVersion: return "bad class version";
    case CmMadError::kBadMethod: return "bad method";
    case CmMadError::kUnknownAttribute: return "unknown attribute";
    case CmMadError::kBadField: return "bad field";
  }
  return "?";
}

CmMadError DecodeMadHeader(const uint8_t* data, size_t length, MadHeader* out) {
  if (data == nullptr || length < kMadHeaderBytes) return CmMadError::kTooShort;
  out->base_version = data[0];
  out->management_class = data[1];
  out->class_version = data[2];
  out->method = data[3];
  out->status = LoadBe16(data + 4);
  out->class_specific = LoadBe16(data + 6);
  out->transaction_id = LoadBe64(data + 8);
  out->attribute_id = LoadBe16(data + 16);
  out->attribute_modifier = LoadBe32(data + 20);
  return CmMadError::kOk;
}

void EncodeMadHeader(const MadHeader& h, uint8_t* out) {
  out[0] = h.base_version;
  out[1] = h.management_class;
  out[2] = h.class_version;
  out[3] = h.method;
  StoreBe16(out + 4, h.status);
  StoreBe16(out + 6, h.class_specific);
  StoreBe64(out + 8, h.transaction_id);
  StoreBe16(out + 16, h.attribute_id);
  StoreBe16(out + 18, 0);  // reserved
  StoreBe32(out + 20, h.attribute_modifier);
}

CmMadError DecodeCmMad(const uint8_t* data, size_t length, CmMad* out) {
  if (data == nullptr || length < kMadBytes) return CmMadError::kTooShort;
  CmMadError e = DecodeMadHeader(data, length, &out->header);
  if (e != CmMadError::kOk) return e;
  const MadHeader& h = out->header;
  if (h.base_version != kMadBaseVersion) return CmMadError::kBadBaseVersion;
  if (h.management_class != kCmManagementClass) return CmMadError::kNotCmClass;
  if (h.class_version != kCmClassVersion) return CmMadError::kBadClassVersion;
  if (h.method != kMadMethodSend) return CmMadError::kBadMethod;
  const uint8_t* m = data + kMadHeaderBytes;
  switch (static_cast<CmAttribute>(h.attribute_id)) {
    case CmAttribute::kReq: return DecodeReq(m, &out->message.emplace<CmReq>());
    case CmAttribute::kMra: return DecodeMra(m, &out->message.emplace<CmMra>());
    case CmAttribute::kRej: return DecodeRej(m, &out->message.emplace<CmRej>());
    case CmAttribute::kRep: return DecodeRep(m, &out->message.emplace<CmRep>());
    case CmAttribute::kRtu: return DecodeIds(m, &out->message.emplace<CmRtu>(), 8);
    case CmAttribute::kDreq: {
      CmDreq& d = out->message.emplace<CmDreq>();
      d.remote_qpn = LoadBe24(m + 8);
      return DecodeIds(m, &d, 12);
    }
    case CmAttribute::kDrep: return DecodeIds(m, &out->message.emplace<CmDrep>(), 8);
  }
  return CmMadError::kUnknownAttribute;
}

CmAttribute AttributeOf(const CmMessage& message) {
  static constexpr CmAttribute kByIndex[] = {CmAttribute::kReq, CmAttribute::kMra, CmAttribute::kRej,
                                             CmAttribute::kRep, CmAttribute::kRtu, CmAttribute::kDreq,
                                             CmAttribute::kDrep};
  return kByIndex[message.index()];
}

void EncodeCmMad(const CmMad& mad, uint8_t* out) {
  std::memset(out, 0, kMadBytes);
  MadHeader h = mad.header;
  h.attribute_id = static_cast<uint16_t>(AttributeOf(mad.message));
  EncodeMadHeader(h, out);
  uint8_t* m = out + kMadHeaderBytes;
  std::visit(
      [m](const auto& message) {
        using T = std::decay_t<decltype(message)>;
        if constexpr (std::is_same_v<T, CmReq>) EncodeReq(message, m);
        else if constexpr (std::is_same_v<T, CmMra>) EncodeMra(message, m);
        else if constexpr (std::is_same_v<T, CmRej>) EncodeRej(message, m);
        else if constexpr (std::is_same_v<T, CmRep>) EncodeRep(message, m);
        else if constexpr (std::is_same_v<T, CmDreq>) {
          EncodeIds(message, m, 12);
          StoreBe24(m + 8, message.remote_qpn & 0xFFFFFF);
        } else {
          EncodeIds(message, m, 8);  // RTU, DREP
        }
      },
      mad.message);
}

CmMadError DecodeIpCmHeader(const uint8_t* data, size_t length, IpCmHeader* out) {
  if (data == nullptr || length < kIpCmHeaderBytes) return CmMadError::kTooShort;
  out->major_version = data[0] >> 4;
  out->minor_version = data[0] & 0xF;
  out->ip_version = data[1] >> 4;
  out->source_port = LoadBe16(data + 2);
  if (out->ip_version == 4) {
    out->source_ip = Ipv4MappedGid(data + 16);
    out->destination_ip = Ipv4MappedGid(data + 32);
  } else if (out->ip_version == 6) {
    out->source_ip = LoadGid(data + 4);
    out->destination_ip = LoadGid(data + 20);
  } else {
    return CmMadError::kBadField;
  }
  return CmMadError::kOk;
}

bool EncodeIpCmHeader(const IpCmHeader& h, uint8_t* out) {
  std::memset(out, 0, kIpCmHeaderBytes);
  out[0] = static_cast<uint8_t>(((h.major_version & 0xF) << 4) | (h.minor_version & 0xF));
  out[1] = static_cast<uint8_t>((h.ip_version & 0xF) << 4);
  StoreBe16(out + 2, h.source_port);
  if (h.ip_version == 4) {
    if (!IsIpv4MappedGid(h.source_ip) || !IsIpv4MappedGid(h.destination_ip)) return false;
    std::memcpy(out + 16, h.source_ip.data() + 12, 4);
    std::memcpy(out + 32, h.destination_ip.data() + 12, 4);
    return true;
  }
  if (h.ip_version == 6) {
    std::memcpy(out + 4, h.source_ip.data(), 16);
    std::memcpy(out + 20, h.destination_ip.data(), 16);
    return true;
  }
  return false;
}

}  // namespace uroce::cm

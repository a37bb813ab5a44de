// Helpers for the tests of api/uroce_cq.h: completions as the engine builds
// them, attributes, and owners that fi_close what they hold.
#pragma once

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <cstdint>
#include <cstring>
#include <memory>

#include "api/uroce_cq.h"

namespace uroce::testing {

inline ibv_wc SuccessWc(uint64_t wr_id, ibv_wc_opcode opcode = IBV_WC_SEND,
                        uint32_t byte_len = 0) {
  ibv_wc wc;
  std::memset(&wc, 0, sizeof(wc));
  wc.wr_id = wr_id;
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = opcode;
  wc.byte_len = byte_len;
  wc.qp_num = 0x11;
  return wc;
}

inline ibv_wc FailedWc(uint64_t wr_id, ibv_wc_status status,
                       ibv_wc_opcode opcode = IBV_WC_SEND) {
  ibv_wc wc = SuccessWc(wr_id, opcode);
  wc.status = status;
  return wc;
}

inline ibv_wc ReceiveWithImmediate(uint64_t wr_id, uint32_t byte_len,
                                   uint32_t imm_host_order) {
  ibv_wc wc = SuccessWc(wr_id, IBV_WC_RECV, byte_len);
  wc.wc_flags = IBV_WC_WITH_IMM;
  wc.imm_data = htonl(imm_host_order);
  return wc;
}

inline fi_cq_attr CqAttr(fi_cq_format format = FI_CQ_FORMAT_DATA,
                         fi_wait_obj wait_obj = FI_WAIT_NONE, size_t size = 0) {
  fi_cq_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.size = size;
  attr.format = format;
  attr.wait_obj = wait_obj;
  return attr;
}

inline fi_cntr_attr CntrAttr(fi_wait_obj wait_obj = FI_WAIT_NONE) {
  fi_cntr_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.events = FI_CNTR_EVENTS_COMP;
  attr.wait_obj = wait_obj;
  return attr;
}

inline fi_eq_attr EqAttr(fi_wait_obj wait_obj = FI_WAIT_NONE, size_t size = 0,
                         uint64_t flags = FI_WRITE) {
  fi_eq_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.size = size;
  attr.flags = flags;
  attr.wait_obj = wait_obj;
  return attr;
}

// fi_close on scope exit; tests close explicitly when they test fi_close.
struct FidCloser {
  template <typename T>
  void operator()(T* object) const {
    if (object != nullptr) fi_close(&object->fid);
  }
};
using CqPtr = std::unique_ptr<fid_cq, FidCloser>;
using CntrPtr = std::unique_ptr<fid_cntr, FidCloser>;
using EqPtr = std::unique_ptr<fid_eq, FidCloser>;

inline CqPtr OpenCq(const fi_cq_attr& attr, void* context = nullptr) {
  fid_cq* cq = nullptr;
  if (uroce_cq_open(&attr, &cq, context) != 0) return CqPtr();
  return CqPtr(cq);
}

inline CntrPtr OpenCntr(const fi_cntr_attr& attr, void* context = nullptr) {
  fid_cntr* cntr = nullptr;
  if (uroce_cntr_open(&attr, &cntr, context) != 0) return CntrPtr();
  return CntrPtr(cntr);
}

inline EqPtr OpenEq(const fi_eq_attr& attr, void* context = nullptr) {
  fid_eq* eq = nullptr;
  if (uroce_eq_open(&attr, &eq, context) != 0) return EqPtr();
  return EqPtr(eq);
}

// Long enough never to expire on a loaded machine; only there so that a bug
// fails a test instead of hanging it.
inline constexpr int kHangGuardMs = 30000;

}  // namespace uroce::testing

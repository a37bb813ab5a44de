#include "cq/wc_mapping.h"

#include <rdma/fi_errno.h>

namespace uroce::cq {

size_t CqEntrySize(fi_cq_format format) {
  switch (format) {
    case FI_CQ_FORMAT_CONTEXT: return sizeof(fi_cq_entry);
    case FI_CQ_FORMAT_MSG: return sizeof(fi_cq_msg_entry);
    case FI_CQ_FORMAT_DATA: return sizeof(fi_cq_data_entry);
    case FI_CQ_FORMAT_TAGGED: return sizeof(fi_cq_tagged_entry);
    case FI_CQ_FORMAT_UNSPEC: break;
  }
  return 0;
}

// ibv_wc_status -> fabric errno. fi_cq(3) says err gives "the general reason
// for an error"; the exact status stays in prov_errno. Why each row:
int FabricErrnoForStatus(int status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return 0;
    // The message was longer than the posted receive buffer: exactly the
    // truncation fi_cq(3) describes for "olen".
    case IBV_WC_LOC_LEN_ERR:
      return FI_ETRUNC;
    // The work request itself could not be executed on this QP (bad opcode,
    // too many SGEs, inline data too long): the caller's argument was wrong.
    case IBV_WC_LOC_QP_OP_ERR:
      return FI_EINVAL;
    // Local key, protection domain or access rights refused a local buffer,
    // and the remote side refused our rkey, bounds or access: permission.
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
    case IBV_WC_REM_ACCESS_ERR:
      return FI_EACCES;
    // Flushed because the QP went to the error state: the operation never
    // ran, which is how libfabric reports a cancelled operation
    // (fi_endpoint(3) fi_cancel: FI_ECANCELED).
    case IBV_WC_WR_FLUSH_ERR:
      return FI_ECANCELED;
    // The responder rejected the request as invalid, or could not complete
    // it: the failure happened at the peer.
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR:
      return FI_EREMOTEIO;
    // No acknowledgement after every transport retry; the responder did not
    // answer a READ or atomic in time.
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RESP_TIMEOUT_ERR:
      return FI_ETIMEDOUT;
    // The peer kept answering "receiver not ready" until rnr_retry ran out:
    // fi_errno(3) has exactly this, "Receiver not ready, no receive buffers
    // available".
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return FI_ENORX;
    // The responder aborted the operation.
    case IBV_WC_REM_ABORT_ERR:
      return FI_ECONNABORTED;
    // Protocol violations by the peer (an unexpected response opcode), fatal
    // device errors, memory-window binds, the Reliable Datagram statuses
    // uroce never produces, tag matching, and anything unknown: a plain I/O
    // error; prov_errno tells which.
    default:
      return FI_EIO;
  }
}

const char* CompletionStatusText(int status) {
  switch (status) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_LEN_ERR: return "local length error: the message did not fit the receive buffer";
    case IBV_WC_LOC_QP_OP_ERR: return "local QP operation error: the work request is not valid on this queue pair";
    case IBV_WC_LOC_EEC_OP_ERR: return "local EE context operation error";
    case IBV_WC_LOC_PROT_ERR: return "local protection error: a local buffer is not covered by a usable memory region";
    case IBV_WC_WR_FLUSH_ERR: return "work request flushed: the queue pair is in the error state";
    case IBV_WC_MW_BIND_ERR: return "memory window bind error";
    case IBV_WC_BAD_RESP_ERR: return "bad response error: the peer answered with an unexpected opcode";
    case IBV_WC_LOC_ACCESS_ERR: return "local access error: a local buffer refused the access";
    case IBV_WC_REM_INV_REQ_ERR: return "remote invalid request error: the peer found the request invalid";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error: the peer refused the key, bounds or access rights";
    case IBV_WC_REM_OP_ERR: return "remote operation error: the peer could not complete the operation";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded: the peer did not acknowledge";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded: the peer had no receive posted";
    case IBV_WC_LOC_RDD_VIOL_ERR: return "local RDD violation error";
    case IBV_WC_REM_INV_RD_REQ_ERR: return "remote invalid RD request error";
    case IBV_WC_REM_ABORT_ERR: return "remote aborted error: the peer aborted the operation";
    case IBV_WC_INV_EECN_ERR: return "invalid EE context number error";
    case IBV_WC_INV_EEC_STATE_ERR: return "invalid EE context state error";
    case IBV_WC_FATAL_ERR: return "fatal error";
    case IBV_WC_RESP_TIMEOUT_ERR: return "response timeout error: the peer did not respond in time";
    case IBV_WC_GENERAL_ERR: return "general error";
    case IBV_WC_TM_ERR: return "tag matching error";
    case IBV_WC_TM_RNDV_INCOMPLETE: return "tag matching rendezvous incomplete";
    default: break;
  }
  return "unknown completion status";
}

void FillCqErrEntry(const ibv_wc& wc, fi_cq_err_entry* entry) {
  entry->op_context = OperationContext(wc);
  entry->flags = CompletionFlags(wc);
  entry->len = ReceivedLength(wc);
  entry->buf = nullptr;
  entry->data = RemoteData(wc);
  entry->tag = 0;
  entry->olen = wc.status == IBV_WC_LOC_LEN_ERR ? wc.vendor_err : 0;
  entry->err = FabricErrnoForStatus(wc.status);
  entry->prov_errno = static_cast<int>(wc.status);
}

}  // namespace uroce::cq

#include "transport/qp_state.h"

#include "common/raw_enum.h"

#include <string>

namespace uroce::transport {
namespace {

struct TransitionRule {
  bool allowed = false;
  int required = 0;
  int optional = 0;
};

constexpr int kRcInitOptional = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kUdInitOptional = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;

bool IsRc(ibv_qp_type type) {
  return type == IBV_QPT_RC || type == IBV_QPT_UC || type == IBV_QPT_XRC_SEND || type == IBV_QPT_XRC_RECV;
}

TransitionRule RcRuleFor(ibv_qp_state from, ibv_qp_state to, bool rc, bool reliable);

// The table of IBTA 11.2.5.2 (as the Linux kernel's qp_state_table encodes it)
// for the QP types uroce offers: RC, UC and UD.
TransitionRule RuleFor(ibv_qp_type type, ibv_qp_state from, ibv_qp_state to) {
  const bool rc = IsRc(type);
  const bool reliable = type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND || type == IBV_QPT_XRC_RECV;
  TransitionRule r = RcRuleFor(from, to, rc, reliable);
  // XRC's halves take RC's attributes, but need only those of their side
  // (IBTA annex A14, XRC; the kernel's qp_state_table): an initiator no
  // responder resources at RTR, a target no requester attributes but the
  // timeout and SQ PSN at RTS. The others stay allowed, as programs that
  // treat XRC QPs like RC ones (rdma-core's pyverbs) pass them.
  if (type == IBV_QPT_XRC_SEND && from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    r.optional |= r.required;
    r.required = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  }
  if (type == IBV_QPT_XRC_RECV && from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
    r.optional |= r.required;
    r.required = IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
  }
  return r;
}

TransitionRule RcRuleFor(ibv_qp_state from, ibv_qp_state to, bool rc, bool reliable) {
  TransitionRule r;
  // Any state may go to RESET or ERR with no other attribute.
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
    r.allowed = true;
    return r;
  }
  switch (from) {
    case IBV_QPS_RESET:
      if (to == IBV_QPS_INIT) {
        r.allowed = true;
        r.required = IBV_QP_PKEY_INDEX | IBV_QP_PORT | (rc ? IBV_QP_ACCESS_FLAGS : IBV_QP_QKEY);
      }
      break;
    case IBV_QPS_INIT:
      if (to == IBV_QPS_INIT) {
        r.allowed = true;
        r.optional = rc ? kRcInitOptional : kUdInitOptional;
      } else if (to == IBV_QPS_RTR) {
        r.allowed = true;
        if (rc) {
          r.required = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
          if (reliable) r.required |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
          r.optional = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
        } else {
          r.optional = IBV_QP_PKEY_INDEX | IBV_QP_QKEY;
        }
      }
      break;
    case IBV_QPS_RTR:
      if (to == IBV_QPS_RTS) {
        r.allowed = true;
        r.required = IBV_QP_SQ_PSN;
        if (reliable) r.required |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
        r.optional = IBV_QP_CUR_STATE |
                     (rc ? (IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE) : IBV_QP_QKEY);
        if (reliable) r.optional |= IBV_QP_MIN_RNR_TIMER;
      }
      break;
    case IBV_QPS_RTS:
      if (to == IBV_QPS_RTS) {
        r.allowed = true;
        r.optional = IBV_QP_CUR_STATE |
                     (rc ? (IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE) : IBV_QP_QKEY);
        if (reliable) r.optional |= IBV_QP_MIN_RNR_TIMER;
      } else if (to == IBV_QPS_SQD) {
        r.allowed = true;
        r.optional = IBV_QP_EN_SQD_ASYNC_NOTIFY;
      }
      break;
    case IBV_QPS_SQD:
      if (to == IBV_QPS_RTS) {
        r.allowed = true;
        r.optional = IBV_QP_CUR_STATE |
                     (rc ? (IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE) : IBV_QP_QKEY);
        if (reliable) r.optional |= IBV_QP_MIN_RNR_TIMER;
      } else if (to == IBV_QPS_SQD) {
        r.allowed = true;
        r.optional = IBV_QP_PKEY_INDEX | IBV_QP_QKEY;
        if (rc) {
          r.optional = IBV_QP_PORT | IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
                       IBV_QP_PATH_MIG_STATE;
          if (reliable) {
            r.optional |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
          }
        }
      }
      break;
    case IBV_QPS_SQE:
      // SQE exists for unreliable QPs only (IBTA 10.3.1.6).
      if (to == IBV_QPS_RTS && !reliable) {
        r.allowed = true;
        r.optional = IBV_QP_CUR_STATE | (rc ? IBV_QP_ACCESS_FLAGS : IBV_QP_QKEY);
      }
      break;
    default:
      break;
  }
  return r;
}

bool ValidState(int s) { return s >= IBV_QPS_RESET && s <= IBV_QPS_ERR; }

Status Invalid(const std::string& what) { return InvalidArgument("ibv_modify_qp: " + what); }

}  // namespace

const char* QpStateName(ibv_qp_state state) {
  switch (state) {
    case IBV_QPS_RESET: return "RESET";
    case IBV_QPS_INIT: return "INIT";
    case IBV_QPS_RTR: return "RTR";
    case IBV_QPS_RTS: return "RTS";
    case IBV_QPS_SQD: return "SQD";
    case IBV_QPS_SQE: return "SQE";
    case IBV_QPS_ERR: return "ERR";
    default: return "UNKNOWN";
  }
}

uint32_t MtuBytes(ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
  }
  return 0;
}

StatusOr<ibv_qp_state> ValidateQpModify(ibv_qp_type type, ibv_qp_state current, const ibv_qp_attr& attr,
                                        int mask, const QpLimits& limits) {
  if (type != IBV_QPT_RC && type != IBV_QPT_UC && type != IBV_QPT_UD && type != IBV_QPT_XRC_SEND &&
      type != IBV_QPT_XRC_RECV) {
    return Status(StatusCode::kNotSupported, "QP type not supported");
  }
  if (!(mask & IBV_QP_STATE)) return Invalid("IBV_QP_STATE missing from the attribute mask");
  // Enum fields come from C callers and may hold any value (common/raw_enum.h).
  if (!ValidState(RawEnum(attr.qp_state))) return Invalid("unknown target state");
  if ((mask & IBV_QP_CUR_STATE) && RawEnum(attr.cur_qp_state) != RawEnum(current)) {
    return Invalid(std::string("cur_qp_state ") + QpStateName(attr.cur_qp_state) + " but the QP is in " +
                   QpStateName(current));
  }
  const ibv_qp_state next = attr.qp_state;
  const TransitionRule rule = RuleFor(type, current, next);
  if (!rule.allowed) {
    return Invalid(std::string("no transition ") + QpStateName(current) + " -> " + QpStateName(next));
  }
  const int given = mask & ~IBV_QP_STATE;
  if ((given & rule.required) != rule.required) {
    return Invalid(std::string("attributes missing for ") + QpStateName(current) + " -> " + QpStateName(next) +
                   " (mask 0x" + std::to_string(rule.required & ~given) + ")");
  }
  if (given & ~(rule.required | rule.optional)) {
    return Invalid(std::string("attributes not allowed for ") + QpStateName(current) + " -> " +
                   QpStateName(next));
  }

  // Values (IBTA 11.2.5.2 and the ranges ibv_modify_qp(3) documents).
  if ((mask & IBV_QP_PATH_MTU) && (RawEnum(attr.path_mtu) < IBV_MTU_256 || RawEnum(attr.path_mtu) > limits.max_mtu)) {
    return Invalid("path_mtu out of range");
  }
  if ((mask & IBV_QP_TIMEOUT) && attr.timeout > 31) return Invalid("timeout > 31");
  if ((mask & IBV_QP_RETRY_CNT) && attr.retry_cnt > 7) return Invalid("retry_cnt > 7");
  if ((mask & IBV_QP_RNR_RETRY) && attr.rnr_retry > 7) return Invalid("rnr_retry > 7");
  if ((mask & IBV_QP_MIN_RNR_TIMER) && attr.min_rnr_timer > 31) return Invalid("min_rnr_timer > 31");
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr.max_rd_atomic > limits.max_rd_atomic) {
    return Invalid("max_rd_atomic above the device limit");
  }
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr.max_dest_rd_atomic > limits.max_dest_rd_atomic) {
    return Invalid("max_dest_rd_atomic above the device limit");
  }
  if ((mask & IBV_QP_SQ_PSN) && attr.sq_psn > 0xffffff) return Invalid("sq_psn is a 24-bit number");
  if ((mask & IBV_QP_RQ_PSN) && attr.rq_psn > 0xffffff) return Invalid("rq_psn is a 24-bit number");
  if ((mask & IBV_QP_DEST_QPN) && attr.dest_qp_num > 0xffffff) return Invalid("dest_qp_num is a 24-bit number");
  if ((mask & IBV_QP_PORT) && (attr.port_num < 1 || attr.port_num > limits.port_count)) {
    return Invalid("port_num " + std::to_string(attr.port_num) + " does not exist");
  }
  if ((mask & IBV_QP_PKEY_INDEX) && attr.pkey_index >= limits.pkey_table_size) return Invalid("pkey_index");
  if (mask & IBV_QP_ACCESS_FLAGS) {
    // IBV_ACCESS_ON_DEMAND: the QP works on ODP regions (rdma-core's ODP
    // tests set it; for uroce every region is one, see api/verbs/mr.cc).
    // IBV_ACCESS_MW_BIND: IBTA's "enable memory window binding" QP
    // attribute; uroce's QPs bind windows whether or not it is set, as mlx5.
    const unsigned known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ON_DEMAND | IBV_ACCESS_MW_BIND;
    if (attr.qp_access_flags & ~known) return Invalid("unknown qp_access_flags");
  }
  if (mask & IBV_QP_AV) {
    // RoCE has no LIDs: every address carries a GRH (IBTA annex A17, RoCEv2).
    if (!attr.ah_attr.is_global) return Invalid("ah_attr.is_global must be 1 on RoCE");
    if (attr.ah_attr.grh.sgid_index >= limits.gid_table_size) return Invalid("ah_attr.grh.sgid_index");
    if (attr.ah_attr.port_num != 0 && attr.ah_attr.port_num > limits.port_count) {
      return Invalid("ah_attr.port_num");
    }
  }
  if (mask & IBV_QP_ALT_PATH) return Status(StatusCode::kNotSupported, "alternate paths are not supported");
  return next;
}

}  // namespace uroce::transport

// The verbs QP state machine (IBTA vol. 1, 10.3.1 "Queue pair and EE context
// states", and the attribute tables of 11.2.5.2 "Modify QP") as ibv_modify_qp
// applies it: for each transition, the attributes that must be given and those
// that may be. Control path only; pure functions, tested on their own.
#pragma once

#include <infiniband/verbs.h>

#include "common/status.h"

namespace uroce::transport {

// Limits of the uroce device that modify_qp checks attributes against.
struct QpLimits {
  uint8_t max_rd_atomic = 16;        // ibv_device_attr.max_qp_rd_atom
  uint8_t max_dest_rd_atomic = 16;   // ibv_device_attr.max_qp_init_rd_atom
  uint8_t port_count = 1;
  uint16_t pkey_table_size = 1;
  uint8_t gid_table_size = 16;
  ibv_mtu max_mtu = IBV_MTU_4096;
};

const char* QpStateName(ibv_qp_state state);

// Checks that `attr`/`mask` form a legal ibv_modify_qp from `current` for a QP
// of `type`, and that every given value is in range. On success returns the
// state the QP moves to. IBV_QP_STATE is always required (attribute changes
// within a state are RTS -> RTS and the like), as the kernel's verbs path
// requires. Errors are kInvalidArgument (EINVAL), as verbs users expect;
// alternate paths are kNotSupported.
StatusOr<ibv_qp_state> ValidateQpModify(ibv_qp_type type, ibv_qp_state current, const ibv_qp_attr& attr,
                                        int mask, const QpLimits& limits);

// IBTA path MTU enum to bytes (256..4096), 0 for an invalid value.
uint32_t MtuBytes(ibv_mtu mtu);

}  // namespace uroce::transport

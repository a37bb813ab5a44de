// uroce_rdmacm_v1: the table librdmacm.so.1 forwards its calls through
// (entry_points.h).
#include "api/rdmacm/entry_points.h"

namespace {

const uroce::rdmacm::RdmacmOps kRdmacmOps = {
    sizeof(uroce::rdmacm::RdmacmOps),
#define UROCE_RDMACM_OPS_ENTRY(ret, name, params, args) &uroce::rdmacm::api::name,
    UROCE_RDMACM_ENTRY_POINTS(UROCE_RDMACM_OPS_ENTRY)
#undef UROCE_RDMACM_OPS_ENTRY
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const uroce::rdmacm::RdmacmOps* uroce_rdmacm_v1(void) {
  return &kRdmacmOps;
}

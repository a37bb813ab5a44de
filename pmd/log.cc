#include "pmd/log.h"

namespace uroce::pmd {
namespace {

// rte_log_register_type_and_pick_level applies the --log-level patterns EAL
// saved, so a type registered after rte_eal_init still takes its level. A
// registration that fails (no room left in DPDK's table) logs as USER1.
int Register(const char* name) {
  const int type = rte_log_register_type_and_pick_level(name, RTE_LOG_NOTICE);
  return type >= 0 ? type : RTE_LOGTYPE_USER1;
}

}  // namespace

int LogType(LogSource source) {
  // Function-local statics: registered once, thread-safe (C++11 [stmt.dcl]).
  switch (source) {
    case LogSource::kPmd: {
      static const int type = Register("uroce.pmd");
      return type;
    }
    case LogSource::kHost: {
      static const int type = Register("uroce.host");
      return type;
    }
    case LogSource::kRuntime: {
      static const int type = Register("uroce.runtime");
      return type;
    }
    case LogSource::kApi: {
      static const int type = Register("uroce.api");
      return type;
    }
  }
  return RTE_LOGTYPE_USER1;
}

}  // namespace uroce::pmd

// The files of configs/ compiled into the `uroce` tool, so that `uroce demo`
// and `uroce perf` run with nothing but the binary (--config FILE reads
// another file instead).
#pragma once

namespace uroce::configs {

// The text of configs/<name>.ini ("ring", "pair-a", "pair-b", "veth-a",
// "veth-b", "pci-template"), or null.
const char* BuiltinConfig(const char* name);

}  // namespace uroce::configs

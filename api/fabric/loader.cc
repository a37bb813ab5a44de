// liburoce-fi.so: the file libfabric loads from FI_PROVIDER_PATH
// (fi_provider(7) "external providers": lib<name>-fi.so exporting
// fi_prov_ini). The provider itself lives in uroce's libibverbs.so.1, beside
// the verbs devices, because a process has one DPDK runtime (EAL starts once)
// and libfabric already loads libibverbs.so.1: under `uroce exec` that is
// uroce's. This file only finds the provider there.
#include <dlfcn.h>
#include <rdma/providers/fi_prov.h>

#include <cstdio>

namespace {

using ProviderEntry = fi_provider* (*)();

}  // namespace

extern "C" __attribute__((visibility("default"))) fi_provider* fi_prov_ini(void) {
  // Version UROCE_PRIVATE_1 of uroce's libibverbs.so.1 (libibverbs.map).
  void* symbol = dlvsym(RTLD_DEFAULT, "uroce_fi_provider_v1", "UROCE_PRIVATE_1");
  if (symbol == nullptr) {
    std::fprintf(stderr,
                 "uroce: liburoce-fi.so needs uroce's libibverbs.so.1 in the process; run the program with "
                 "`uroce exec --config FILE -- PROGRAM` (the uroce provider is not available)\n");
    return nullptr;
  }
  return reinterpret_cast<ProviderEntry>(symbol)();
}

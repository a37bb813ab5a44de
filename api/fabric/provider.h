// uroce's libfabric provider (fi_provider(7)), compiled into uroce's
// libibverbs.so.1 and handed to libfabric by liburoce-fi.so.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/providers/fi_prov.h>

namespace uroce::fabric {

fi_provider* FabricProvider();

// endpoint.cc: fi_endpoint for a domain, and the options both kinds of
// endpoint answer (fi_getopt(3)).
int EndpointOpen(fid_domain* domain, fi_info* info, fid_ep** ep, void* context);
int EndpointGetopt(fid* f, int level, int optname, void* optval, size_t* optlen);

}  // namespace uroce::fabric

// The provider, for liburoce-fi.so's fi_prov_ini (exported by uroce's
// libibverbs.so.1 as version UROCE_PRIVATE_1).
extern "C" fi_provider* uroce_fi_provider_v1();

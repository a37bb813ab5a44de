// `uroce exec [--config FILE] -- PROGRAM [ARGS...]`: runs an unmodified
// verbs, rdma_cm or libfabric program over uroce. It puts the directories of
// uroce's libibverbs.so.1 and librdmacm.so.1 first in LD_LIBRARY_PATH (so
// the program's dependencies on Debian's rdma-core libraries resolve to
// uroce's; libfabric links libibverbs.so.1 too), adds the directory of liburoce-fi.so to
// FI_PROVIDER_PATH (where libfabric looks for external providers,
// fi_provider(7)), and names the configuration in UROCE_CONFIG (without
// --config and UROCE_CONFIG, the program attaches to `uroce daemon`), then execs the
// program: its exit status, signals and stdio are the program's own.
//
// Run as root, it first gives the program a private
// mount namespace in which /dev/infiniband/uverbsN and
// /sys/class/infiniband/uroceN exist, as a kernel RDMA driver would make
// them (device_files.h: UCX does not see a device without them), for the
// configuration's devices or the daemon's (its DEVICES answer);
// --device-files=no leaves the program in the host's namespace.
//
// The libraries are found, in order: $UROCE_VERBS_LIB_DIR (and
// $UROCE_RDMACM_LIB_DIR, $UROCE_FABRIC_LIB_DIR); beside this binary in
// Bazel's output tree (bazel-bin/tools/uroce -> bazel-bin/api/verbs,
// bazel-bin/api/rdmacm, bazel-bin/api/fabric); in
// this binary's runfiles (bazel run / bazel test).
#include <link.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tools/command.h"
#include "runtime/config.h"
#include "host/daemon_client.h"
#include "tools/device_files.h"
#include "tools/library_dirs.h"

namespace uroce::tools {

int ExecUsage(FILE* out) {
  std::fprintf(out,
               "usage: uroce exec [--config FILE] [--impair SPEC] [--device-files=auto|yes|no] -- PROGRAM [ARGS...]\n"
               "  runs PROGRAM with uroce's libibverbs.so.1, librdmacm.so.1 and libfabric provider\n"
               "  (liburoce-fi.so, provider \"uroce\"); uroce devices from FILE, or from $UROCE_CONFIG, or else\n"
               "  the host's devices from the running `uroce daemon` ($UROCE_DAEMON or /run/uroce/uroce.sock)\n"
               "  --impair SPEC: network faults on PROGRAM's ports, the keys of [impair] (README, \"Fault\n"
               "  injection\"), e.g. loss=0.02,reorder=0.01,dup=0.001,delay_us=50,corrupt=0.0001,rnr_storm=0.1,seed=7;\n"
               "  what was injected is printed at exit\n"
               "  --device-files: present /dev/infiniband/uverbsN and /sys/class/infiniband/uroceN to PROGRAM\n"
               "  in a private mount namespace (UCX needs them); auto (default): when root, silently\n"
               "  not otherwise; yes: or fail; no: never\n");
  return out == stdout ? 0 : 2;
}

namespace {

// A sanitizer build of uroce's libraries (--config=asan / tsan) needs the
// sanitizer's runtime first in the program's library list, and Debian's
// programs are not built with it: the runtime this binary was linked with is
// preloaded (the sanitizer's own advice), and leak detection is off in the
// program (leaks of fi_info or rping at exit are not uroce's; uroce's own
// leaks are caught by its unit tests). Empty in a normal build.
std::string SanitizerRuntime() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#if defined(__SANITIZE_ADDRESS__)
  const char* wanted = "libasan.so";
#else
  const char* wanted = "libtsan.so";
#endif
  struct Search {
    const char* wanted;
    std::string found;
  } search{wanted, ""};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_name != nullptr && std::strstr(info->dlpi_name, s->wanted) != nullptr) {
          s->found = info->dlpi_name;
          return 1;
        }
        return 0;
      },
      &search);
  return search.found;
#else
  return "";
#endif
}

}  // namespace

// --device-files (device_files.h): whether the program sees the device files
// a kernel RDMA driver would make.
enum class DeviceFilesMode { kAuto, kYes, kNo };

// Presents the configuration's devices; 0, or an exit status when `mode`
// insists and it cannot be done.
int PresentDevices(DeviceFilesMode mode, const std::string& config) {
  if (mode == DeviceFilesMode::kNo) return 0;
  if (mode == DeviceFilesMode::kAuto && geteuid() != 0) return 0;
  Status s = Status::Ok();
  // Without a configuration the program attaches to the daemon: its devices.
  auto devices = config.empty() ? DevicesOfDaemon(host::DaemonSocketPath()) : DevicesOfConfig(config);
  if (!devices.ok()) {
    s = devices.status();
  } else {
    s = PresentDeviceFiles(*devices);
  }
  if (s.ok() || mode == DeviceFilesMode::kAuto) return 0;  // auto: the program runs without them (verbs does)
  std::fprintf(stderr, "uroce exec: cannot present the device files: %s\n", s.ToString().c_str());
  return 2;
}

int ExecCommand(int argc, char** argv) {
  std::string config;
  std::string impair;
  DeviceFilesMode device_files = DeviceFilesMode::kAuto;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "--config" && i + 1 < argc) {
      config = argv[++i];
    } else if (a.rfind("--config=", 0) == 0) {
      config = a.substr(9);
    } else if ((a == "--impair" && i + 1 < argc) || a.rfind("--impair=", 0) == 0) {
      impair = a == "--impair" ? argv[++i] : a.substr(9);
      // Checked here (keys and values), so that a typo fails at once rather
      // than in the program.
      if (auto parsed = runtime::ParseImpairSpec(impair); !parsed.ok()) {
        std::fprintf(stderr, "uroce exec: %s\n", parsed.status().message().c_str());
        return 2;
      }
    } else if (a == "--device-files=auto" || a == "--device-files=yes" || a == "--device-files=no") {
      const std::string v = a.substr(15);
      device_files = v == "yes" ? DeviceFilesMode::kYes : v == "no" ? DeviceFilesMode::kNo : DeviceFilesMode::kAuto;
    } else if (a == "-h" || a == "--help") {
      ExecUsage(stderr);
      return 0;
    } else {
      std::fprintf(stderr, "uroce exec: unknown argument '%s'\n", a.c_str());
      return ExecUsage(stderr);
    }
  }
  if (i >= argc) return ExecUsage(stderr);
  if (!config.empty()) {
    const std::string abs = Absolute(config);
    if (abs.empty()) {
      std::fprintf(stderr, "uroce exec: cannot read configuration '%s': %s\n", config.c_str(), std::strerror(errno));
      return 2;
    }
    setenv("UROCE_CONFIG", abs.c_str(), 1);
  }
  // The program's library reads it (runtime/process.cc), over the
  // configuration's own [impair].
  if (!impair.empty()) setenv("UROCE_IMPAIR", impair.c_str(), 1);
  {
    const char* env_config = secure_getenv("UROCE_CONFIG");
    if (int rc = PresentDevices(device_files, env_config != nullptr ? env_config : ""); rc != 0) return rc;
  }
  // Neither --config nor UROCE_CONFIG: the program attaches to the running
  // uroce daemon (UROCE_DAEMON, or /run/uroce/uroce.sock); the library says
  // how to start one if there is none.
  const std::string lib = FindLibraryDir("UROCE_VERBS_LIB_DIR", "verbs", "libibverbs.so.1");
  if (lib.empty()) {
    std::fprintf(stderr,
                 "uroce exec: cannot find uroce's libibverbs.so.1 (build //api/verbs:libibverbs.so.1, or set "
                 "UROCE_VERBS_LIB_DIR)\n");
    return 2;
  }
  std::string path = lib;
  // librdmacm.so.1: optional as the provider below (a verbs-only build).
  if (const std::string rdmacm = FindLibraryDir("UROCE_RDMACM_LIB_DIR", "rdmacm", "librdmacm.so.1");
      !rdmacm.empty() && rdmacm != lib) {
    path += ":" + rdmacm;
  }
  if (const char* old = secure_getenv("LD_LIBRARY_PATH"); old != nullptr && *old != '\0') path += std::string(":") + old;
  setenv("LD_LIBRARY_PATH", path.c_str(), 1);
  // The libfabric provider: optional (a verbs-only build may lack it).
  if (const std::string fabric = FindLibraryDir("UROCE_FABRIC_LIB_DIR", "fabric", "liburoce-fi.so");
      !fabric.empty()) {
    std::string providers = fabric;
    if (const char* old = secure_getenv("FI_PROVIDER_PATH"); old != nullptr && *old != '\0') {
      providers += std::string(":") + old;
    }
    setenv("FI_PROVIDER_PATH", providers.c_str(), 1);
  }
  if (const std::string runtime = SanitizerRuntime(); !runtime.empty()) {
    std::string preload = runtime;
    if (const char* old = getenv("LD_PRELOAD"); old != nullptr && *old != '\0') preload += std::string(":") + old;
    setenv("LD_PRELOAD", preload.c_str(), 1);
    std::string options = "detect_leaks=0";
    if (const char* old = getenv("ASAN_OPTIONS"); old != nullptr && *old != '\0') options = std::string(old) + ":" + options;
    setenv("ASAN_OPTIONS", options.c_str(), 1);
  }
  execvp(argv[i], argv + i);
  std::fprintf(stderr, "uroce exec: cannot run '%s': %s\n", argv[i], std::strerror(errno));
  return 127;
}

}  // namespace uroce::tools

// `uroce cdi`: hands the host's `uroce daemon` to containers as a Container
// Device Interface device (CDI, github.com/cncf-tags/container-device-interface,
// SPEC.md, version 0.5.0), kind "uroce.dev/rdma", as a GPU is handed in. It
// copies uroce's libibverbs.so.1, librdmacm.so.1 and liburoce-fi.so, with
// the libraries they need that an image does not bring (DPDK's and their own
// dependencies, found by ldd(1)), into one directory of the host, and writes
// a spec whose container edits are:
//   - that directory, mounted read-only at /opt/uroce/lib;
//   - the daemon socket's directory, mounted read-only at /run/uroce (a
//     connect(2) needs no write access to the file system: a socket is not
//     refused on a read-only mount, path_resolution(7));
//   - DPDK's ring mempool driver (librte_mempool_ring), mounted read-only as
//     the only file of the directory DPDK's EAL loads drivers from
//     (RTE_EAL_PMD_PATH, the host's build of DPDK): every DPDK packet pool
//     needs it, and EAL finds it only there (a DPDK program of the image
//     itself sees no other driver of its own there);
//   - LD_LIBRARY_PATH, FI_PROVIDER_PATH and UROCE_DAEMON, which make the
//     image's own verbs, rdma_cm and libfabric programs load uroce's
//     libraries and attach to the daemon, as `uroce exec` does on the host;
//   - with --rootless, UROCE_DAEMON_UID too: in a rootless container's user
//     namespace a daemon of a uid the namespace does not map (root, or a
//     service user) shows as the kernel's overflow uid
//     (/proc/sys/kernel/overflowuid, user_namespaces(7)), and the programs
//     take a configuration only from a daemon of root, their own uid or
//     that one (host/daemon_client.h). The socket's directory is the
//     daemon's, checked below and mounted read-only, so no other process
//     of that uid can put a socket there.
// Nothing else: no device node, no capability, no host network. Memory comes
// from the daemon over the socket (memfds as SCM_RIGHTS), so the container
// needs no /dev/shm of the host either.
//
// Left to the image, and never copied, so that the container's programs keep
// their own: the C library (glibc's libraries and loader), libstdc++ and
// libgcc_s (uroce's libraries need versions at least as new as the host's),
// and libfabric itself (uroce's provider is loaded by the image's libfabric).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <rte_build_config.h>

#include "common/status.h"
#include "host/daemon_client.h"
#include "tools/command.h"
#include "tools/library_dirs.h"

namespace uroce::tools {
namespace {

constexpr const char* kContainerLibraries = "/opt/uroce/lib";
constexpr const char* kContainerSocketDir = "/run/uroce";
// The drivers EAL loads by itself (rte_build_config.h), and the one an
// attached process needs: mempool ops "ring_mp_mc", DPDK's default.
constexpr const char* kDriverDir = RTE_EAL_PMD_PATH;
// EAL loads every file there whose name ends in ".so" (eal_common_options.c).
constexpr const char* kMempoolDriver = "librte_mempool_ring.so";

int CdiUsageText(FILE* out) {
  std::fprintf(out,
               "usage: uroce cdi [--output FILE] [--libraries DIR] [--socket PATH] [--name NAME] [--rootless]\n"
               "  writes a CDI spec (Container Device Interface 0.5.0) that hands the host's `uroce daemon` to\n"
               "  containers as the device uroce.dev/rdma=NAME: podman run --device uroce.dev/rdma=uroce0 ...\n"
               "  The container gets uroce's libraries (read-only, at %s), the daemon socket's\n"
               "  directory (read-only, at %s) and the environment that makes its verbs, rdma_cm\n"
               "  and libfabric programs use them; no device node, no capability, no host network.\n"
               "  --output FILE: the spec (default /etc/cdi/uroce.json; podman, CRI-O and containerd read\n"
               "  /etc/cdi and /var/run/cdi); - writes it to stdout\n"
               "  --libraries DIR: the host directory the libraries are copied into (default\n"
               "  /var/lib/uroce/cdi); run uroce cdi again after an upgrade\n"
               "  --socket PATH: the daemon's control socket ($UROCE_DAEMON, default /run/uroce/uroce.sock)\n"
               "  --name NAME: the device's name (default uroce0)\n"
               "  --rootless: for rootless containers (podman run by a user) of a daemon run by root or by\n"
               "  another user: their programs are told to trust the uid that daemon shows as there, the\n"
               "  kernel's overflow uid (/proc/sys/kernel/overflowuid). The user must be able to connect to\n"
               "  the socket in the container, where it has no supplementary group: give it an ACL entry\n"
               "  (setfacl -m u:USER:rw SOCKET, after each start of the daemon), and let it reach the\n"
               "  socket's directory and DIR\n",
               kContainerLibraries, kContainerSocketDir);
  return out == stdout ? 0 : 2;
}

std::string Directory(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string Base(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Libraries an image must bring itself (see the top of this file): glibc's,
// the C++ runtime, libfabric, and the rdma-core libraries uroce replaces.
bool LeftToImage(const std::string& soname) {
  static const std::set<std::string> kLeft = {
      "libc.so.6",     "libm.so.6",      "libdl.so.2",       "libpthread.so.0",    "librt.so.1",
      "libresolv.so.2", "libutil.so.1",  "libanl.so.1",      "libmvec.so.1",       "libthread_db.so.1",
      "libstdc++.so.6", "libgcc_s.so.1", "libfabric.so.1",   "libibverbs.so.1",    "librdmacm.so.1",
  };
  return kLeft.count(soname) != 0 || soname.rfind("ld-linux", 0) == 0 || soname.rfind("libnss_", 0) == 0;
}

// The shared libraries `library` needs, transitively, as soname -> path,
// from ldd(1) (the dynamic loader's own resolution, LD_TRACE_LOADED_OBJECTS).
StatusOr<std::map<std::string, std::string>> Dependencies(const std::string& library) {
  // The path in single quotes for sh(1), each ' in it as '\''.
  std::string quoted = "'";
  for (const char ch : library) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  quoted += "'";
  const std::string command = "ldd " + quoted + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return IoError(std::string("cannot run ldd: ") + std::strerror(errno));
  std::map<std::string, std::string> found;
  std::string missing;
  char line[4096];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    // "\tlibrte_eal.so.23 => /lib/x86_64-linux-gnu/librte_eal.so.23 (0x...)"
    const std::string text(line);
    const size_t arrow = text.find(" => ");
    if (arrow == std::string::npos) continue;  // the vDSO, the loader
    const size_t start = text.find_first_not_of(" \t");
    const std::string soname = text.substr(start, arrow - start);
    const std::string rest = text.substr(arrow + 4);
    if (rest.rfind("not found", 0) == 0) {
      missing += (missing.empty() ? "" : ", ") + soname;
      continue;
    }
    const size_t end = rest.find(" (");
    found[soname] = rest.substr(0, end == std::string::npos ? rest.find('\n') : end);
  }
  const int rc = pclose(pipe);
  if (!missing.empty()) return FailedPrecondition(library + " needs libraries this host does not have: " + missing);
  if (rc != 0) return IoError("ldd " + library + " failed (exit " + std::to_string(rc) + ")");
  return found;
}

// Copies `from` to DIR/NAME through a temporary name and rename(2), so that a
// running container that maps the old file keeps it whole.
Status CopyInto(const std::string& from, const std::string& dir, const std::string& name) {
  const int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return IoError("cannot read " + from + ": " + std::strerror(errno));
  const std::string temporary = dir + "/." + name + ".new";
  const int out = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    close(in);
    return IoError("cannot write " + temporary + ": " + std::strerror(errno));
  }
  std::vector<char> buffer(1 << 20);
  Status status = Status::Ok();
  for (;;) {
    const ssize_t n = read(in, buffer.data(), buffer.size());
    if (n == 0) break;
    if (n < 0 || write(out, buffer.data(), static_cast<size_t>(n)) != n) {
      status = IoError("cannot copy " + from + " to " + temporary + ": " + std::strerror(errno));
      break;
    }
  }
  close(in);
  if (fchmod(out, 0644) != 0 && status.ok()) status = IoError("chmod " + temporary + ": " + std::strerror(errno));
  if (close(out) != 0 && status.ok()) status = IoError("cannot write " + temporary + ": " + std::strerror(errno));
  if (status.ok() && rename(temporary.c_str(), (dir + "/" + name).c_str()) != 0) {
    status = IoError("cannot rename " + temporary + ": " + std::strerror(errno));
  }
  if (!status.ok()) unlink(temporary.c_str());
  return status;
}

// mkdir -p, each new directory 0755.
Status MakeDirectories(const std::string& path) {
  if (path.empty() || path == "/" || path == ".") return Status::Ok();
  struct stat st{};
  if (stat(path.c_str(), &st) == 0) {
    return S_ISDIR(st.st_mode) ? Status::Ok() : FailedPrecondition(path + " is not a directory");
  }
  if (Status parent = MakeDirectories(Directory(path)); !parent.ok()) return parent;
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return IoError("cannot make " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(ch));
      out += escaped;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// The uid a user namespace shows for a host uid it does not map
// (user_namespaces(7)).
unsigned OverflowUid() {
  unsigned uid = 65534;
  if (FILE* f = std::fopen("/proc/sys/kernel/overflowuid", "r")) {
    if (std::fscanf(f, "%u", &uid) != 1) uid = 65534;
    std::fclose(f);
  }
  return uid;
}

// The spec (CDI SPEC.md 0.5.0: cdiVersion, kind, devices[].containerEdits).
// `trusted_daemon_uid`: empty, or the UROCE_DAEMON_UID the programs get.
std::string Spec(const std::string& name, const std::string& libraries, const std::string& socket_path,
                 const std::string& trusted_daemon_uid) {
  const std::string socket_dir = Directory(socket_path);
  const std::string container_socket = std::string(kContainerSocketDir) + "/" + Base(socket_path);
  std::string s;
  s += "{\n";
  s += "  \"cdiVersion\": \"0.5.0\",\n";
  s += "  \"kind\": \"uroce.dev/rdma\",\n";
  s += "  \"devices\": [\n";
  s += "    {\n";
  s += "      \"name\": " + JsonString(name) + ",\n";
  s += "      \"containerEdits\": {\n";
  s += "        \"env\": [\n";
  s += "          " + JsonString(std::string("LD_LIBRARY_PATH=") + kContainerLibraries) + ",\n";
  s += "          " + JsonString(std::string("FI_PROVIDER_PATH=") + kContainerLibraries) + ",\n";
  s += "          " + JsonString("UROCE_DAEMON=" + container_socket) + (trusted_daemon_uid.empty() ? "\n" : ",\n");
  if (!trusted_daemon_uid.empty()) s += "          " + JsonString("UROCE_DAEMON_UID=" + trusted_daemon_uid) + "\n";
  s += "        ],\n";
  s += "        \"mounts\": [\n";
  s += "          {\"hostPath\": " + JsonString(libraries) + ", \"containerPath\": " + JsonString(kContainerLibraries) +
       ", \"options\": [\"ro\", \"nosuid\", \"nodev\", \"bind\"]},\n";
  s += "          {\"hostPath\": " + JsonString(libraries + "/drivers") + ", \"containerPath\": " +
       JsonString(kDriverDir) + ", \"options\": [\"ro\", \"nosuid\", \"nodev\", \"bind\"]},\n";
  s += "          {\"hostPath\": " + JsonString(socket_dir) + ", \"containerPath\": " + JsonString(kContainerSocketDir) +
       ", \"options\": [\"ro\", \"nosuid\", \"nodev\", \"noexec\", \"bind\"]}\n";
  s += "        ]\n";
  s += "      }\n";
  s += "    }\n";
  s += "  ]\n";
  s += "}\n";
  return s;
}

Status WriteFileAtomically(const std::string& path, const std::string& text) {
  if (Status dir = MakeDirectories(Directory(path)); !dir.ok()) return dir;
  const std::string temporary = path + ".new";
  FILE* f = std::fopen(temporary.c_str(), "w");
  if (f == nullptr) return IoError("cannot write " + temporary + ": " + std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !written) {
    unlink(temporary.c_str());
    return IoError("cannot write " + temporary + ": " + std::strerror(errno));
  }
  chmod(temporary.c_str(), 0644);
  if (rename(temporary.c_str(), path.c_str()) != 0) {
    unlink(temporary.c_str());
    return IoError("cannot rename " + temporary + " to " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace

int CdiUsage(FILE* out) { return CdiUsageText(out); }

int CdiCommand(int argc, char** argv) {
  std::string output = "/etc/cdi/uroce.json";
  std::string libraries = "/var/lib/uroce/cdi";
  std::string socket_path = host::DaemonSocketPath();
  std::string name = "uroce0";
  bool rootless = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* option, std::string* into) {
      const std::string flag = option;
      if (a == flag && i + 1 < argc) {
        *into = argv[++i];
        return true;
      }
      if (a.rfind(flag + "=", 0) == 0) {
        *into = a.substr(flag.size() + 1);
        return true;
      }
      return false;
    };
    if (value("--output", &output) || value("--libraries", &libraries) || value("--socket", &socket_path) ||
        value("--name", &name)) {
      continue;
    }
    if (a == "--rootless") {
      rootless = true;
      continue;
    }
    if (a == "-h" || a == "--help") return CdiUsageText(stdout);
    std::fprintf(stderr, "uroce cdi: unknown argument '%s'\n", a.c_str());
    return CdiUsageText(stderr);
  }
  // CDI SPEC.md: a device name is letters, digits, '_', '-', '.' and ':'.
  if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:") !=
                          std::string::npos) {
    std::fprintf(stderr, "uroce cdi: --name '%s': letters, digits, '_', '-', '.' and ':' only\n", name.c_str());
    return 2;
  }
  if (socket_path.empty() || socket_path[0] != '/' || libraries.empty() || libraries[0] != '/') {
    std::fprintf(stderr, "uroce cdi: --socket and --libraries must be absolute paths\n");
    return 2;
  }
  // A socket directory others may write lets them replace the socket: the
  // programs in the container would refuse it (host/daemon_client.cc).
  struct stat dir_stat{};
  const std::string socket_dir = Directory(socket_path);
  if (stat(socket_dir.c_str(), &dir_stat) != 0) {
    std::fprintf(stderr,
                 "uroce cdi: %s does not exist: start `uroce daemon` first (its [daemon] socket is %s), or name the "
                 "socket with --socket\n",
                 socket_dir.c_str(), socket_path.c_str());
    return 1;
  }
  if ((dir_stat.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    std::fprintf(stderr,
                 "uroce cdi: %s is writable by others; a container would get every file in it and programs refuse "
                 "such a socket: give the daemon a directory of its own\n",
                 socket_dir.c_str());
    return 1;
  }

  struct Wanted {
    const char* env;
    const char* subdir;
    const char* file;
    bool required;
  };
  const Wanted wanted[] = {{"UROCE_VERBS_LIB_DIR", "verbs", "libibverbs.so.1", true},
                           {"UROCE_RDMACM_LIB_DIR", "rdmacm", "librdmacm.so.1", false},
                           {"UROCE_FABRIC_LIB_DIR", "fabric", "liburoce-fi.so", false}};
  std::map<std::string, std::string> files;  // name in the directory -> source
  for (const Wanted& w : wanted) {
    const std::string dir = FindLibraryDir(w.env, w.subdir, w.file);
    if (dir.empty()) {
      std::fprintf(stderr, "uroce cdi: %s uroce's %s (build it, or set %s)\n", w.required ? "cannot find" : "without",
                   w.file, w.env);
      if (w.required) return 1;
      continue;
    }
    const std::string path = dir + "/" + w.file;
    files[w.file] = path;
    auto deps = Dependencies(path);
    if (!deps.ok()) {
      std::fprintf(stderr, "uroce cdi: %s\n", deps.status().message().c_str());
      return 1;
    }
    for (const auto& [soname, from] : *deps) {
      if (!LeftToImage(soname)) files.emplace(soname, from);
    }
  }
  if (Status s = MakeDirectories(libraries); !s.ok()) {
    std::fprintf(stderr, "uroce cdi: %s\n", s.message().c_str());
    return 1;
  }
  chmod(libraries.c_str(), 0755);
  for (const auto& [file, from] : files) {
    if (Status s = CopyInto(from, libraries, file); !s.ok()) {
      std::fprintf(stderr, "uroce cdi: %s\n", s.message().c_str());
      return 1;
    }
  }
  // The driver: the host's file, whatever its version suffix, as DIR/drivers/librte_mempool_ring.so.
  const std::string drivers = libraries + "/drivers";
  const std::string driver = Absolute(std::string(kDriverDir) + "/" + kMempoolDriver);
  if (driver.empty()) {
    std::fprintf(stderr, "uroce cdi: no %s in %s (Debian's librte-mempool-ring23)\n", kMempoolDriver, kDriverDir);
    return 1;
  }
  if (Status s = MakeDirectories(drivers); !s.ok()) {
    std::fprintf(stderr, "uroce cdi: %s\n", s.message().c_str());
    return 1;
  }
  if (Status s = CopyInto(driver, drivers, kMempoolDriver); !s.ok()) {
    std::fprintf(stderr, "uroce cdi: %s\n", s.message().c_str());
    return 1;
  }
  const std::string spec = Spec(name, Absolute(libraries), socket_path, rootless ? std::to_string(OverflowUid()) : "");
  if (output == "-") {
    std::fputs(spec.c_str(), stdout);
  } else if (Status s = WriteFileAtomically(output, spec); !s.ok()) {
    std::fprintf(stderr, "uroce cdi: %s\n", s.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "uroce cdi: %zu libraries in %s; device uroce.dev/rdma=%s (daemon socket %s%s)%s%s\n",
               files.size(), libraries.c_str(), name.c_str(), socket_path.c_str(),
               rootless ? ", for rootless containers" : "", output == "-" ? "" : "; spec ",
               output == "-" ? "" : output.c_str());
  return 0;
}

}  // namespace uroce::tools

#include "tools/device_files.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "runtime/config.h"
#include "host/daemon_client.h"

namespace uroce::tools {
namespace {

// The infiniband_verbs character devices: major 231, minors from 192
// (Documentation/admin-guide/devices.txt, "InfiniBand ... uverbs").
constexpr unsigned kUverbsMajor = 231;
constexpr unsigned kUverbsFirstMinor = 192;
// ibv_query_port's gid_tbl_len (api/verbs/context.cc): sysfs lists every
// entry of the table, empty ones as zeros.
constexpr size_t kGidTableLength = 16;

Status Errno(const std::string& what) { return IoError(what + ": " + std::strerror(errno)); }

// The sysfs spelling of a GID: eight groups of four hex digits.
std::string GidText(const transport::Gid& gid) {
  char text[40];
  std::snprintf(text, sizeof(text), "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", gid[0],
                gid[1], gid[2], gid[3], gid[4], gid[5], gid[6], gid[7], gid[8], gid[9], gid[10], gid[11], gid[12],
                gid[13], gid[14], gid[15]);
  return text;
}

// The kernel's cpumask format (bitmap_print_to_pagebuf): 32-bit hex words,
// most significant first, comma-separated. Every CPU is local to a software
// NIC.
std::string AllCpusMask(unsigned cpus) {
  const unsigned words = std::max(1u, (cpus + 31) / 32);
  std::string out;
  for (unsigned w = words; w-- > 0;) {
    uint32_t bits = 0;
    for (unsigned b = 0; b < 32; ++b) {
      if (w * 32 + b < cpus) bits |= 1u << b;
    }
    char word[9];
    std::snprintf(word, sizeof(word), "%08x", bits);
    out += word;
    if (w != 0) out += ',';
  }
  return out;
}

// The kernel interface holding one of `gids` (IPv4-mapped or IPv6), or "".
std::string InterfaceHolding(const std::vector<transport::Gid>& gids) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* a = list; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    transport::Gid gid{};
    if (a->ifa_addr->sa_family == AF_INET) {
      gid[10] = gid[11] = 0xff;
      std::memcpy(&gid[12], &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, 4);
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      std::memcpy(gid.data(), &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, 16);
    } else {
      continue;
    }
    if (std::find(gids.begin(), gids.end(), gid) != gids.end()) found = a->ifa_name;
  }
  freeifaddrs(list);
  return found;
}

Status CheckRelativePath(const std::string& path) {
  if (path.empty() || path[0] == '/') return InvalidArgument("not a relative path: '" + path + "'");
  for (size_t start = 0; start <= path.size();) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return InvalidArgument("a path leaves its tree: '" + path + "'");
    start = end + 1;
  }
  return Status::Ok();
}

Status MakeDirs(const std::string& path) {
  for (size_t slash = path.find('/', 1); ; slash = path.find('/', slash + 1)) {
    const std::string part = slash == std::string::npos ? path : path.substr(0, slash);
    if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return Errno("mkdir " + part);
    if (slash == std::string::npos) return Status::Ok();
  }
}

Status WriteFile(const std::string& path, const std::string& text) {
  UROCE_RETURN_IF_ERROR(MakeDirs(path.substr(0, path.rfind('/'))));
  std::ofstream out(path);
  out << text << '\n';
  out.close();
  if (!out) return Errno("write " + path);
  return Status::Ok();
}

// Mount points strictly below /dev (pts, shm, mqueue, hugepages...), outermost
// only: moving one moves what is mounted below it.
std::vector<std::string> DevSubmounts() {
  std::vector<std::string> points;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point;
    fields >> id >> parent >> device >> root >> point;
    // Octal escapes (\040 for a space): such names are not /dev's own.
    if (point.rfind("/dev/", 0) == 0 && point.find('\\') == std::string::npos) points.push_back(point);
  }
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  std::vector<std::string> outermost;
  for (const std::string& p : points) {
    if (outermost.empty() || p.rfind(outermost.back() + "/", 0) != 0) outermost.push_back(p);
  }
  return outermost;
}

}  // namespace

StatusOr<std::vector<PresentedDevice>> DevicesOfConfig(const std::string& config_path) {
  auto config = runtime::LoadConfigFile(config_path);
  if (!config.ok()) return config.status();
  std::vector<PresentedDevice> devices;
  for (size_t i = 0; i < config->endpoints.size(); ++i) {
    PresentedDevice d;
    d.index = static_cast<unsigned>(i);
    d.gids = config->endpoints[i].gids;
    d.netdev = InterfaceHolding(d.gids);
    devices.push_back(std::move(d));
  }
  return devices;
}

StatusOr<std::vector<PresentedDevice>> ParseDaemonDevices(const std::string& text) {
  // Strict (host::ParseDevicesReply): the names become paths that root
  // creates below, so a name that is not an interface's is refused.
  auto lines = host::ParseDevicesReply(text);
  if (!lines.ok()) return IoError(lines.status().message());
  std::vector<PresentedDevice> devices;
  for (host::DeviceLine& line : *lines) {
    PresentedDevice d;
    d.index = line.index;
    d.gids = std::move(line.gids);
    d.netdev = line.netdev.empty() ? InterfaceHolding(d.gids) : std::move(line.netdev);
    devices.push_back(std::move(d));
  }
  return devices;
}

StatusOr<std::vector<PresentedDevice>> DevicesOfDaemon(const std::string& socket_path) {
  auto text = host::QueryDaemonDevices(socket_path);
  if (!text.ok()) return text.status();
  return ParseDaemonDevices(*text);
}

DeviceTree BuildDeviceTree(const std::vector<PresentedDevice>& devices, unsigned cpus) {
  DeviceTree tree;
  tree.sys_files.emplace_back("infiniband_verbs/abi_version", "6");
  for (const PresentedDevice& d : devices) {
    const std::string name = "uroce" + std::to_string(d.index);
    const std::string uverbs = "uverbs" + std::to_string(d.index);
    const std::string dev = "infiniband/" + name + "/";
    const std::string port = dev + "ports/1/";
    tree.sys_files.emplace_back(dev + "node_type", "1: CA");
    tree.sys_files.emplace_back(dev + "node_desc", name);
    tree.sys_files.emplace_back(port + "state", "4: ACTIVE");
    tree.sys_files.emplace_back(port + "phys_state", "5: LinkUp");
    tree.sys_files.emplace_back(port + "link_layer", "Ethernet");
    tree.sys_files.emplace_back(port + "lid", "0x0");
    for (size_t g = 0; g < kGidTableLength; ++g) {
      const std::string index = std::to_string(g);
      tree.sys_files.emplace_back(port + "gids/" + index, GidText(g < d.gids.size() ? d.gids[g] : transport::Gid{}));
      if (g >= d.gids.size()) continue;  // the kernel has no type for an empty entry
      tree.sys_files.emplace_back(port + "gid_attrs/types/" + index, "RoCE v2");  // every uroce GID is RoCEv2
      if (!d.netdev.empty()) tree.sys_files.emplace_back(port + "gid_attrs/ndevs/" + index, d.netdev);
    }
    tree.sys_files.emplace_back(dev + "device/numa_node", "-1");  // no NUMA affinity: a software NIC
    tree.sys_files.emplace_back(dev + "device/local_cpus", AllCpusMask(cpus));
    if (!d.netdev.empty()) tree.sys_dirs.push_back(dev + "device/net/" + d.netdev);
    tree.sys_files.emplace_back("infiniband_verbs/" + uverbs + "/ibdev", name);
    tree.sys_files.emplace_back("infiniband_verbs/" + uverbs + "/dev",
                                std::to_string(kUverbsMajor) + ":" + std::to_string(kUverbsFirstMinor + d.index));
    tree.char_devices.emplace_back("infiniband/" + uverbs, kUverbsFirstMinor + d.index);
  }
  return tree;
}

Status PresentDeviceFiles(const std::vector<PresentedDevice>& devices) {
  if (geteuid() != 0) return PermissionDenied("presenting device files needs root (mount namespaces)");
  if (unshare(CLONE_NEWNS) != 0) return Errno("unshare(CLONE_NEWNS)");
  // Private: nothing mounted here reaches the host's namespace.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return Errno("making / private");
  char scratch[] = "/tmp/uroce-exec.XXXXXX";
  if (mkdtemp(scratch) == nullptr) return Errno("mkdtemp");
  const std::string root = scratch;
  // The scratch directory is the host's only while this function runs: the
  // tmpfs on it is detached and the directory removed before returning.
  struct Cleanup {
    std::string root;
    ~Cleanup() {
      umount2(root.c_str(), MNT_DETACH);
      rmdir(root.c_str());
    }
  } cleanup{root};
  if (mount("tmpfs", root.c_str(), "tmpfs", MS_NOSUID, "mode=0755") != 0) return Errno("tmpfs on " + root);

  const DeviceTree tree = BuildDeviceTree(devices, static_cast<unsigned>(sysconf(_SC_NPROCESSORS_CONF)));
  // Every path stays below the scratch tree: no absolute path, no "." or
  // ".." component (the names in it came from the daemon, checked there).
  for (const auto& [path, text] : tree.sys_files) UROCE_RETURN_IF_ERROR(CheckRelativePath(path));
  for (const std::string& dir : tree.sys_dirs) UROCE_RETURN_IF_ERROR(CheckRelativePath(dir));
  for (const auto& [path, minor] : tree.char_devices) UROCE_RETURN_IF_ERROR(CheckRelativePath(path));
  for (const char* d : {"/sys/upper", "/sys/work", "/dev/upper", "/dev/work", "/keep"}) {
    UROCE_RETURN_IF_ERROR(MakeDirs(root + d));
  }
  for (const auto& [path, text] : tree.sys_files) UROCE_RETURN_IF_ERROR(WriteFile(root + "/sys/upper/" + path, text));
  for (const std::string& dir : tree.sys_dirs) UROCE_RETURN_IF_ERROR(MakeDirs(root + "/sys/upper/" + dir));
  for (const auto& [path, minor] : tree.char_devices) {
    const std::string node = root + "/dev/upper/" + path;
    UROCE_RETURN_IF_ERROR(MakeDirs(node.substr(0, node.rfind('/'))));
    // Read-write for everyone, as rdma-core's udev rules make uverbs nodes;
    // opening it reaches no driver (ENXIO): programs only stat and access it.
    if (mknod(node.c_str(), S_IFCHR | 0666, makedev(kUverbsMajor, minor)) != 0) return Errno("mknod " + node);
    chmod(node.c_str(), 0666);  // past the umask
  }

  const std::string sys_options =
      "lowerdir=/sys/class,upperdir=" + root + "/sys/upper,workdir=" + root + "/sys/work";
  if (mount("overlay", "/sys/class", "overlay", 0, sys_options.c_str()) != 0) return Errno("overlay on /sys/class");

  // /dev: its mounts are kept aside (bound under the scratch tmpfs), the
  // overlay goes on, and they are moved back onto it.
  const std::vector<std::string> submounts = DevSubmounts();
  std::vector<std::string> kept;
  for (size_t i = 0; i < submounts.size(); ++i) {
    const std::string keep = root + "/keep/" + std::to_string(i);
    if (mkdir(keep.c_str(), 0755) != 0 || mount(submounts[i].c_str(), keep.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
      return Errno("keeping " + submounts[i]);
    }
    kept.push_back(keep);
  }
  const std::string dev_options = "lowerdir=/dev,upperdir=" + root + "/dev/upper,workdir=" + root + "/dev/work";
  if (mount("overlay", "/dev", "overlay", 0, dev_options.c_str()) != 0) return Errno("overlay on /dev");
  for (size_t i = 0; i < kept.size(); ++i) {
    if (mount(kept[i].c_str(), submounts[i].c_str(), nullptr, MS_MOVE, nullptr) != 0) {
      const Status failed = Errno("moving " + submounts[i] + " back");
      umount2("/dev", MNT_DETACH);  // the host's /dev as it was, mounts and all
      return failed;
    }
  }
  return Status::Ok();
}

}  // namespace uroce::tools

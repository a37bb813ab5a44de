#include "common/private_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace uroce {

Status CheckPrivateDir(const std::string& path, uid_t owner, bool create) {
  if (path.empty() || path[0] != '/') return InvalidArgument("'" + path + "' is not an absolute path");
  if (create && mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return IoError("cannot create " + path + ": " + std::strerror(errno));
  }
  // Opened without following a symlink, then checked through the open
  // file: what is checked is what the path names now.
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ELOOP || e == ENOTDIR) return PermissionDenied(path + " is not a directory (a symlink?): refusing it");
    return IoError("cannot open " + path + ": " + std::strerror(e));
  }
  struct stat st{};
  const int stat_result = fstat(fd, &st);
  close(fd);
  if (stat_result != 0) return IoError("cannot look at " + path + ": " + std::strerror(errno));
  if (st.st_uid != owner || (st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return PermissionDenied(path + " belongs to uid " + std::to_string(st.st_uid) + " with mode " + mode +
                            ", not to uid " + std::to_string(owner) +
                            " alone: refusing it (remove it, or set UROCE_RUNTIME_DIR to a directory of mode 0700)");
  }
  return Status::Ok();
}

StatusOr<std::string> PrivateRuntimeDir() {
  const uid_t self = geteuid();
  if (const char* dir = secure_getenv("UROCE_RUNTIME_DIR"); dir != nullptr && *dir != '\0') {
    UROCE_RETURN_IF_ERROR(CheckPrivateDir(dir, self, true));
    return std::string(dir);
  }
  if (const char* xdg = secure_getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg != '\0') {
    // The user's own (pam_systemd makes it 0700): only then is it used.
    if (CheckPrivateDir(xdg, self, false).ok()) {
      const std::string dir = std::string(xdg) + "/uroce";
      UROCE_RETURN_IF_ERROR(CheckPrivateDir(dir, self, true));
      return dir;
    }
  }
  const std::string dir = "/tmp/uroce-" + std::to_string(self);
  UROCE_RETURN_IF_ERROR(CheckPrivateDir(dir, self, true));
  return dir;
}

}  // namespace uroce

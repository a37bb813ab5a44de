// The directory where a uroce process puts the sockets only its own user
// may reach: memif pairs that name no socket, `uroce perf`'s side channel.
// In order:
//   $UROCE_RUNTIME_DIR           (secure_getenv(3); created if missing)
//   $XDG_RUNTIME_DIR/uroce       (the user's runtime directory, per the XDG
//                                 Base Directory specification)
//   /tmp/uroce-UID
// Sockets at predictable paths in a shared /tmp could be bound first by
// another user, who would then be the peer of every frame, QPN and rkey.
// The directory is made with mode 0700 and then checked, made by us or not:
// a directory (not a symlink), owned by this process's effective uid, with
// no access for group or others. Anything else is refused with what is
// wrong, never repaired (another user may have made it).
//
// Control path only.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"

namespace uroce {

StatusOr<std::string> PrivateRuntimeDir();

// The checks above on one directory: kPermissionDenied naming the owner or
// mode that is wrong. Creates it (0700) when `create` and it is missing.
Status CheckPrivateDir(const std::string& path, uid_t owner, bool create);

}  // namespace uroce

/* A shared object that proves it was loaded: its constructor creates the
 * file named by UROCE_CANARY. The fake daemon of fake_daemon_test.sh asks an
 * attaching program to load it as an EAL driver (-d). */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void uroce_canary(void) {
  const char* path = getenv("UROCE_CANARY");
  if (path == NULL) return;
  int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd >= 0) close(fd);
}

// SIGINT and SIGTERM as a request for a clean shutdown: the handler only sets
// a flag (the one async-signal-safe thing to do); the application's loops
// check ShutdownRequested() and then shut the Runtime down, which stops the
// engine lcores, flushes the QPs and checks that every mbuf is back in its
// pool. A second signal of the same kind ends the process at once (the
// handler is installed with SA_RESETHAND), for a loop that never checks,
// unless the process asks otherwise (SecondSignal).
#pragma once

namespace uroce::pmd {

// What a second SIGINT/SIGTERM does while the first is being handled.
// kIsIgnored is for a process whose clean stop others depend on (uroce
// daemon: its sessions must close and its socket go): timeout(1), for one,
// sends the signal twice (to the process and to its process group), so the
// second would otherwise kill it in the middle of its stop. SIGKILL still
// ends it.
enum class SecondSignal { kEndsProcess, kIsIgnored };

// Any thread, once per process (later calls re-arm the handlers). Also
// ignores SIGPIPE, so a closed peer socket is an error, not a death.
void InstallShutdownSignals(SecondSignal second = SecondSignal::kEndsProcess);

// Any thread; async-signal-safe.
bool ShutdownRequested();
// The signal that asked (SIGINT or SIGTERM), 0 if none.
int ShutdownSignal();

// Tests: forget an earlier request and re-arm.
void ResetShutdownRequest();

}  // namespace uroce::pmd

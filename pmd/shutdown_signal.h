// SIGINT and SIGTERM as a request for a clean shutdown: the handler only sets
// a flag (the one async-signal-safe thing to do); the application's loops
// check ShutdownRequested() and then shut the Runtime down, which stops the
// engine lcores, flushes the QPs and checks that every mbuf is back in its
// pool.
//
// A second SIGINT ends the process at once (its handler is installed with
// SA_RESETHAND): a person pressing Ctrl-C again means it. A second SIGTERM
// does not: it comes from tools, not people, and tools send it twice
// without meaning to; timeout(1), for one, signals its command and then the
// command's whole process group, so a process under timeout gets SIGTERM
// twice, and a second one that killed it would cut its clean stop short
// (memif_test's server was killed that way, at random, mid-shutdown).
// SIGKILL still ends a process that does not stop.
#pragma once

namespace uroce::pmd {

// Any thread, once per process (later calls re-arm the handlers). Also
// ignores SIGPIPE, so a closed peer socket is an error, not a death.
void InstallShutdownSignals();

// Any thread; async-signal-safe.
bool ShutdownRequested();
// The signal that asked (SIGINT or SIGTERM), 0 if none.
int ShutdownSignal();

// Tests: forget an earlier request and re-arm.
void ResetShutdownRequest();

}  // namespace uroce::pmd

// Keeps a memif peer that hangs up before the handshake from crashing this
// process.
//
// DPDK 22.11's net_memif accepts a connection on its listening socket on
// EAL's interrupt thread (memif_listener_handler, memif_socket.c): it
// registers the new control channel as an interrupt source, then sends
// HELLO. When that send fails, it closes the descriptor and frees the
// channel, but leaves the source registered. The send fails whenever the
// peer connected and went away before this process accepted: this process
// was stopped (SIGSTOP, a debugger) or not scheduled for longer than the
// peer waits, or the peer died, or anyone allowed to connect to the socket
// connected and closed. EAL's interrupt thread rebuilds its epoll set from
// every registered source at the next unregistration, adds the closed
// descriptor, gets EBADF and calls rte_panic: the process aborts ("Error
// adding fd N epoll_ctl, Bad file descriptor"). Had the number been reused
// first, memif's callback would run on the freed channel instead.
//
// The guard points memif's import of sendmsg at a wrapper (pmd/memif_import.h)
// that sends with MSG_NOSIGNAL and reports a send to a peer that is gone
// (EPIPE, ECONNRESET) as done. The channel then stays registered and whole;
// epoll keeps reporting the hang-up, memif_intr_handler reads end-of-file
// and unregisters and closes the channel the way it was meant to
// (rte_intr_callback_unregister_pending). Nothing is lost: the message was
// for a peer that no longer exists. Every other memif send that fails this
// way ends in the same handler a moment later, on the same hang-up.
//
// MSG_NOSIGNAL because memif sends with no flags: an application under
// `uroce exec` that does not ignore SIGPIPE would otherwise die of its memif
// peer's exit (send(2), EPIPE).
#pragma once

#include <cstdint>

#include "common/status.h"

namespace uroce::pmd {

// Points memif's import of sendmsg at the wrapper. Idempotent; the first
// call's result is kept. Fails when net_memif is not loaded, or when its
// import cannot be rewritten (then memif runs unguarded, and a warning says
// so). Control path: before a memif port starts.
Status InstallMemifHangupGuard();

// Sends by memif to a peer that was gone, reported to memif as done.
uint64_t MemifSendsToGonePeers();

}  // namespace uroce::pmd

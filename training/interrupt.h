// Ctrl-C, once for every program: the first SIGINT (or SIGTERM) asks the run to stop after the
// step it is in; the training loop saves its checkpoint and exits with code 130.
//
//   training::catch_interrupts();            // first thing in main, before any thread starts
//   for (...) { ...; if (training::interrupted()) { save; return 130; } }
//
// How, and why so: a signal handler runs on the stack of whichever thread the kernel picks, just
// below that thread's stack pointer. oneDNN's sgemm keeps data below its stack pointer, where a
// signal frame then lands: about one Ctrl-C in six corrupted the heap. So no thread that computes
// ever runs a handler. catch_interrupts() blocks SIGINT and SIGTERM in the calling thread — every
// thread started afterwards (ag's pool, OpenMP's, MPI's) inherits the mask — and starts one
// thread that waits for them with sigwait() and sets the flag. A thread that existed before, with
// the signals unblocked, gets a handler that only sets the flag, on an alternate signal stack
// where it has one (SA_ONSTACK). The second signal ends the process at once, as a second Ctrl-C
// does elsewhere (exit code 130).
#pragma once

namespace ag::training {

// Installs the policy above; idempotent. Call it in main before anything starts threads.
void catch_interrupts();

// Whether a SIGINT or SIGTERM has arrived since catch_interrupts().
bool interrupted();

}  // namespace ag::training

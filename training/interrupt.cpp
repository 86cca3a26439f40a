#include "training/interrupt.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace ag::training {

namespace {

std::atomic<int> signals_received{0};

// The only work done on a signal: count it; the second one ends the process (130: 128 + SIGINT).
void on_signal() {
  if (signals_received.fetch_add(1) >= 1) _exit(130);
}
extern "C" void on_signal_handler(int) { on_signal(); }

sigset_t interrupt_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

void install() {
  // The handler, for threads that existed before and left the signals unblocked (a library's
  // threads started when it was loaded): on the alternate stack below, where the thread has one.
  static char alternate_stack[64 * 1024];
  stack_t stack{};
  stack.ss_sp = alternate_stack;
  stack.ss_size = sizeof alternate_stack;
  sigaltstack(&stack, nullptr);
  struct sigaction action {};
  action.sa_handler = on_signal_handler;
  action.sa_flags = SA_ONSTACK | SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  // Blocked here, and so in every thread started from now on; one thread takes them instead.
  const sigset_t set = interrupt_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    for (;;) {
      int signal_number = 0;
      if (sigwait(&set, &signal_number) == 0) on_signal();
    }
  }).detach();
}

}  // namespace

void catch_interrupts() {
  static std::once_flag once;
  std::call_once(once, install);
}

bool interrupted() { return signals_received.load() > 0; }

}  // namespace ag::training

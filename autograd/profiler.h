// ag's profiler: where a step's time and memory go, op by op — torch.profiler's names and tables.
//
//   {
//     ag::profiler::profile prof;                       // records from here ...
//     Tensor loss = model(x).sum();
//     loss.backward();
//     prof.stop();                                      // ... to here (or the end of its scope)
//     std::cout << prof.key_averages().table("total");  // one row per op, by total time
//     prof.export_chrome_trace("trace.json");           // for chrome://tracing or ui.perfetto.dev
//   }
//
// What it records, as scopes opened and closed on the thread that made the profile:
//   - every differentiable op of autograd/op_list.h, under its name ("matmul", "layer_norm"): the
//     op's forward, from the call to the return (AG_PROFILE_OP at the top of the op's function);
//   - every node that backward runs, as "<op>_backward" ("matmul_backward", and "cube_backward"
//     for ag::make_op("cube", ...)): the node's backward function and the adding of the
//     gradients it returns into its inputs' gradients;
//   - the user's own scopes: ag::profiler::record_function scope("attention block");
// Scopes nest: an op called by another op, or by a backward function (mul_backward calls mul),
// is that scope's child. Each scope has a total time (open to close) and a self time (total minus
// its children's totals), so the self times of all rows add up to the time the scopes cover, and
// what they leave out of the profile's wall time is time spent outside any scope (Python, a data
// loader, the optimizer's loop unless it is wrapped in a record_function).
//
// Bytes: the storage that tensors (and dropout's masks) ask the caching allocator for while the
// scope is open (autograd/allocator.h), by any thread — a parallel loop's workers count for the
// op that runs it — before rounding, whether the cache serves it or the system does; frees are not
// subtracted. Self bytes leave out the children's. Other threads' allocations at the same time
// (a second thread of the user's own running ops) would be counted too: profile one at a time.
//
// Threads: only the thread that made the profile records; ops that other threads run meanwhile
// are not recorded (nor are the pool's workers, whose time belongs to the op running the parallel
// loop). One profile records at a time in a process: a second one throws ValueError.
//
// Cost: when no profile is recording, each op pays one test of a global flag — no clock read, no
// allocation. While one records, each scope reads the clock twice and appends one event.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autograd/op_list.h"

namespace ag::profiler {

// One closed scope, as the trace shows it. Times are nanoseconds since the profile started.
struct FunctionEvent {
  std::string name;
  bool backward = false;    // a node's backward ("<op>_backward")
  bool user_scope = false;  // a record_function
  int depth = 0;            // 0 for a scope no other scope encloses
  int64_t start_ns = 0;
  int64_t duration_ns = 0;  // total: open to close
  int64_t self_ns = 0;      // total minus the children's totals
  uint64_t bytes = 0;       // asked of the allocator while open (children included)
  uint64_t self_bytes = 0;  // the same, without the children's
};

// One row of key_averages(): every event of one name, summed.
struct FunctionEventAvg {
  std::string key;  // the name
  int64_t count = 0;
  int64_t self_ns = 0;
  int64_t total_ns = 0;
  uint64_t bytes = 0;
  uint64_t self_bytes = 0;
  int64_t average_ns() const { return count == 0 ? 0 : total_ns / count; }
};

// key_averages()'s rows with the profile's wall time, printable as torch.profiler's table.
class EventList {
 public:
  EventList(std::vector<FunctionEventAvg> rows, int64_t wall_ns)
      : rows_(std::move(rows)), wall_ns_(wall_ns) {}
  const std::vector<FunctionEventAvg>& rows() const { return rows_; }
  int64_t wall_ns() const { return wall_ns_; }
  // The sum of every row's self time: the time the scopes cover.
  int64_t self_ns_sum() const;

  // The table, its rows sorted (descending) by `sort_by` — "total" (torch's "cpu_time_total"),
  // "self" ("self_cpu_time_total"), "calls" ("count"), "bytes" ("cpu_memory_usage") or
  // "self_bytes" ("self_cpu_memory_usage") — at most `row_limit` of them (all when < 0); ties by
  // name. Its columns: Name, Self %, Self, Total, Total avg, Calls, Bytes, Self bytes ("Self %" of
  // the wall time), and under it the profiled wall time and the share of it the rows' self
  // times account for. ValueError for another sort key.
  std::string table(const std::string& sort_by = "total", int64_t row_limit = -1) const;

 private:
  std::vector<FunctionEventAvg> rows_;
  int64_t wall_ns_;
};

namespace detail {
struct Session;
}

// Records from construction to stop() or destruction (torch.profiler.profile). ValueError if
// another profile is recording. Not copyable or movable: the recording thread's scopes point at it.
class profile {
 public:
  profile();
  ~profile();
  profile(const profile&) = delete;
  profile& operator=(const profile&) = delete;

  // Ends the recording (scopes still open are dropped); the results stay. A second call does
  // nothing. Call it on the thread that made the profile.
  void stop();
  bool recording() const;

  // From construction to stop() (to now while recording).
  int64_t wall_ns() const;
  // Every closed scope, in the order they closed.
  std::vector<FunctionEvent> events() const;
  // One row per name, in order of first appearance (EventList::table sorts them).
  EventList key_averages() const;
  // The events as Chrome's trace format (JSON: {"traceEvents": [...]}, complete events "ph": "X"
  // with ts and dur in µs, pid and tid), for chrome://tracing or https://ui.perfetto.dev.
  std::string chrome_trace() const;
  // chrome_trace() written to `path`; IoError naming the path if it cannot be written.
  void export_chrome_trace(const std::string& path) const;

 private:
  detail::Session* session_;
};

namespace detail {
// Whether a profile is recording (on any thread): the one test an op pays when none is.
extern std::atomic<bool> g_recording;

// Open and close a scope on this thread; open returns false (and close must then not be called)
// when this thread is not the recording one. name ids: op o is o, its backward kNumOps + o.
bool open_scope(int name_id);
bool open_named_scope(std::string_view name, bool backward, bool user_scope);
void close_scope() noexcept;

// The guard AG_PROFILE_OP declares: op `op`'s forward, for the lifetime of the guard.
class OpScope {
 public:
  explicit OpScope(Op op) {
    if (g_recording.load(std::memory_order_relaxed)) [[unlikely]]
      open_ = open_scope(static_cast<int>(op));
  }
  ~OpScope() {
    if (open_) [[unlikely]]
      close_scope();
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  bool open_ = false;
};

// A node's backward, for the lifetime of the guard (autograd.cpp's run_backward): "<op>_backward",
// or the custom op's name with "_backward". (A template, so that this header need not include
// autograd.h for ag::Node.)
class BackwardScope {
 public:
  template <class Node>
  explicit BackwardScope(const Node& node) {
    if (g_recording.load(std::memory_order_relaxed)) [[unlikely]]
      open_ = node.op() == Op::custom
                  ? open_named_scope(node.name(), /*backward=*/true, /*user_scope=*/false)
                  : open_scope(kNumOps + static_cast<int>(node.op()));
  }
  // Op op's backward, done by the engine for several of its nodes at once (slices' gradients
  // written into one: autograd.cpp).
  explicit BackwardScope(Op op) {
    if (g_recording.load(std::memory_order_relaxed)) [[unlikely]]
      open_ = open_scope(kNumOps + static_cast<int>(op));
  }
  ~BackwardScope() {
    if (open_) [[unlikely]]
      close_scope();
  }
  BackwardScope(const BackwardScope&) = delete;
  BackwardScope& operator=(const BackwardScope&) = delete;

 private:
  bool open_ = false;
};
}  // namespace detail

// A scope of the user's own, shown in the table and the trace under `name`
// (torch.profiler.record_function):
//   { ag::profiler::record_function scope("optimizer.step"); optimizer.step(); }
class record_function {
 public:
  explicit record_function(std::string_view name) {
    if (detail::g_recording.load(std::memory_order_relaxed)) [[unlikely]]
      open_ = detail::open_named_scope(name, /*backward=*/false, /*user_scope=*/true);
  }
  ~record_function() {
    if (open_) [[unlikely]]
      detail::close_scope();
  }
  record_function(const record_function&) = delete;
  record_function& operator=(const record_function&) = delete;

 private:
  bool open_ = false;
};

}  // namespace ag::profiler

// At the top of a differentiable op's public function, inside namespace ag:
//   Tensor matmul(const Tensor& a, const Tensor& b) {
//     AG_PROFILE_OP(Op::matmul);
// records the op's forward while a profile is recording (one flag test when none is).
#define AG_PROFILE_OP(op) const ::ag::profiler::detail::OpScope ag_profile_op_scope_(op)

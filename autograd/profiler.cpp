// The profiler (autograd/profiler.h): a stack of open scopes on the recording thread, closed scopes
// appended as events, and the tables and the trace made from them afterwards.
//
// Self time, exactly: when a scope closes, its duration is added to its parent's children_ns, and
// its self time is its duration minus its own children_ns. So the self times of a scope and of
// everything inside it add up to that scope's total, nanosecond for nanosecond (the clock's
// ticks, not a rounding of them), and the self times of all events add up to the totals of the
// outermost scopes. Bytes are counted the same way, from the allocator's running count of bytes
// asked for (detail::bytes_requested).
#include "autograd/profiler.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "autograd/allocator.h"
#include "autograd/error.h"

namespace ag::profiler {

namespace detail {

std::atomic<bool> g_recording{false};

// (Kind, RawEvent and OpenScope are Session's fields: in this named namespace, as Session is,
// which the header declares.)
enum class Kind : uint8_t { op, backward, user };

// A scope that closed. name_id indexes Session::names.
struct RawEvent {
  int32_t name_id;
  int32_t depth;
  int64_t start_ns;
  int64_t duration_ns;
  int64_t self_ns;
  uint64_t bytes;
  uint64_t self_bytes;
};

// A scope still open, with what its closed children took so far.
struct OpenScope {
  int32_t name_id;
  int64_t start_ns;
  uint64_t bytes_at_open;
  int64_t children_ns = 0;
  uint64_t children_bytes = 0;
};

namespace {

using Clock = std::chrono::steady_clock;

// Bumped by every start and stop: a thread's stale session pointer (of a profile stopped or
// destroyed meanwhile) is never used, since its generation no longer matches.
std::atomic<uint64_t> g_generation{0};
thread_local Session* t_session = nullptr;
thread_local uint64_t t_generation = 0;

}  // namespace

struct Session {
  Clock::time_point start = Clock::now();
  int64_t stop_ns = -1;  // -1 while recording
  std::thread::id thread = std::this_thread::get_id();
  std::vector<std::string> names;  // by name id: the ops, their backwards, then interned names
  std::vector<Kind> kinds;
  std::unordered_map<std::string, int32_t> interned;
  std::vector<RawEvent> events;
  std::vector<OpenScope> open;

  Session() {
    names.reserve(2 * kNumOps);
    for (int op = 0; op < kNumOps; ++op) {
      names.emplace_back(kOpNames[op]);
      kinds.push_back(Kind::op);
    }
    for (int op = 0; op < kNumOps; ++op) {
      names.push_back(std::string(kOpNames[op]) + "_backward");
      kinds.push_back(Kind::backward);
    }
    events.reserve(1 << 14);
    open.reserve(64);
  }

  int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  }

  int32_t intern(std::string name, Kind kind) {
    // A backward of a custom op and a record_function of the same text stay apart.
    std::string key = name;
    key.push_back(static_cast<char>('0' + static_cast<int>(kind)));
    auto [it, inserted] = interned.try_emplace(std::move(key), static_cast<int32_t>(names.size()));
    if (inserted) {
      names.push_back(std::move(name));
      kinds.push_back(kind);
    }
    return it->second;
  }
};

namespace {

// This thread's recording session, or null.
Session* recording_session() {
  Session* session = t_session;
  if (session == nullptr || t_generation != g_generation.load(std::memory_order_acquire))
    return nullptr;
  return session;
}

bool open_id(Session& session, int32_t name_id) {
  session.open.push_back(
      {name_id, /*start_ns=*/0, /*bytes_at_open=*/ag::detail::bytes_requested()});
  session.open.back().start_ns = session.now_ns();  // last: the push is not the scope's time
  return true;
}

}  // namespace

bool open_scope(int name_id) {
  Session* session = recording_session();
  if (session == nullptr) return false;
  try {
    return open_id(*session, name_id);
  } catch (const std::bad_alloc&) {  // no room for the scope: record without it
    return false;
  }
}

bool open_named_scope(std::string_view name, bool backward, bool user_scope) {
  Session* session = recording_session();
  if (session == nullptr) return false;
  std::string text(name);
  if (backward) text += "_backward";
  const Kind kind = user_scope ? Kind::user : backward ? Kind::backward : Kind::op;
  try {
    return open_id(*session, session->intern(std::move(text), kind));
  } catch (const std::bad_alloc&) {
    return false;
  }
}

void close_scope() noexcept {
  Session* session = recording_session();
  // Opened before a stop (and a new profile on this thread): nothing of it is recorded.
  if (session == nullptr || session->open.empty()) return;
  const int64_t end_ns = session->now_ns();
  const uint64_t bytes_now = ag::detail::bytes_requested();
  const OpenScope scope = session->open.back();
  session->open.pop_back();
  const int64_t duration = end_ns - scope.start_ns;
  const uint64_t bytes = bytes_now - scope.bytes_at_open;
  if (!session->open.empty()) {
    session->open.back().children_ns += duration;
    session->open.back().children_bytes += bytes;
  }
  try {
    session->events.push_back(
        {scope.name_id, static_cast<int32_t>(session->open.size()), scope.start_ns, duration,
            duration - scope.children_ns, bytes, bytes - scope.children_bytes});
  } catch (const std::bad_alloc&) {  // the event is lost; its parent still counts its time
  }
}

}  // namespace detail

// ---- profile ------------------------------------------------------------------------------------

profile::profile() {
  bool expected = false;
  if (!detail::g_recording.compare_exchange_strong(expected, true))
    fail<ValueError>("profiler: a profile is already recording; stop it before starting another");
  try {
    session_ = new detail::Session;
  } catch (...) {
    detail::g_recording.store(false);
    throw;
  }
  detail::t_session = session_;
  detail::t_generation = detail::g_generation.fetch_add(1, std::memory_order_acq_rel) + 1;
  session_->start = detail::Clock::now();  // after the setup, which is no op's time
}

profile::~profile() {
  stop();
  delete session_;
}

void profile::stop() {
  if (session_->stop_ns >= 0) return;
  session_->stop_ns = session_->now_ns();
  session_->open.clear();
  detail::g_generation.fetch_add(1, std::memory_order_acq_rel);
  if (std::this_thread::get_id() == session_->thread) detail::t_session = nullptr;
  detail::g_recording.store(false);
}

bool profile::recording() const { return session_->stop_ns < 0; }

int64_t profile::wall_ns() const {
  return session_->stop_ns >= 0 ? session_->stop_ns : session_->now_ns();
}

std::vector<FunctionEvent> profile::events() const {
  std::vector<FunctionEvent> events;
  events.reserve(session_->events.size());
  for (const detail::RawEvent& raw : session_->events) {
    const detail::Kind kind = session_->kinds[raw.name_id];
    events.push_back(
        {session_->names[raw.name_id], kind == detail::Kind::backward, kind == detail::Kind::user,
            raw.depth, raw.start_ns, raw.duration_ns, raw.self_ns, raw.bytes, raw.self_bytes});
  }
  return events;
}

EventList profile::key_averages() const {
  std::vector<FunctionEventAvg> rows;
  std::vector<int64_t> row_of(session_->names.size(), -1);  // name id -> row
  for (const detail::RawEvent& raw : session_->events) {
    int64_t& row = row_of[raw.name_id];
    if (row < 0) {
      row = static_cast<int64_t>(rows.size());
      rows.push_back({session_->names[raw.name_id]});
    }
    FunctionEventAvg& r = rows[row];
    ++r.count;
    r.self_ns += raw.self_ns;
    r.total_ns += raw.duration_ns;
    r.bytes += raw.bytes;
    r.self_bytes += raw.self_bytes;
  }
  return EventList(std::move(rows), wall_ns());
}

namespace {

// `text` as a JSON string's contents: quotes, backslashes and control characters escaped.
std::string json_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", static_cast<unsigned>(c));
      out += code;
    } else {
      out += c;
    }
  }
  return out;
}

// Nanoseconds as microseconds with three decimals: "12.345".
std::string micros(int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%lld.%03lld", static_cast<long long>(ns / 1000),
      static_cast<long long>(ns % 1000));
  return text;
}

}  // namespace

std::string profile::chrome_trace() const {
  const long long pid = static_cast<long long>(getpid());
  const long long tid =
      static_cast<long long>(std::hash<std::thread::id>{}(session_->thread) & 0x7fffffff);
  std::ostringstream out;
  out << "{\"traceEvents\": [\n";
  out << "  {\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " << pid
      << ", \"args\": {\"name\": \"ag\"}},\n";
  out << "  {\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " << pid << ", \"tid\": " << tid
      << ", \"args\": {\"name\": \"profiled thread\"}}";
  // Outer scopes first where two start together, so viewers nest them: by start, then depth.
  std::vector<const detail::RawEvent*> order;
  order.reserve(session_->events.size());
  for (const detail::RawEvent& raw : session_->events) order.push_back(&raw);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->depth < b->depth;
  });
  for (const detail::RawEvent* raw : order) {
    const detail::Kind kind = session_->kinds[raw->name_id];
    out << ",\n  {\"name\": \"" << json_escaped(session_->names[raw->name_id]) << "\", \"cat\": \""
        << (kind == detail::Kind::user          ? "user_annotation"
               : kind == detail::Kind::backward ? "backward"
                                                : "cpu_op")
        << "\", \"ph\": \"X\", \"ts\": " << micros(raw->start_ns)
        << ", \"dur\": " << micros(raw->duration_ns) << ", \"pid\": " << pid << ", \"tid\": " << tid
        << ", \"args\": {\"bytes\": " << raw->bytes << ", \"self bytes\": " << raw->self_bytes
        << ", \"self us\": " << micros(raw->self_ns) << "}}";
  }
  out << "\n], \"displayTimeUnit\": \"ms\"}\n";
  return out.str();
}

void profile::export_chrome_trace(const std::string& path) const {
  const std::string text = chrome_trace();
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file)
    fail<IoError>(
        "export_chrome_trace: cannot open '", path, "' for writing: ", std::strerror(errno));
  file << text;
  file.close();
  if (!file) fail<IoError>("export_chrome_trace: writing '", path, "' failed");
}

// ---- the table ----------------------------------------------------------------------------------

namespace {

// torch.profiler's units: "812.000us", "12.345ms", "1.234s".
std::string time_text(int64_t ns) {
  char text[32];
  if (ns < 1000000)
    std::snprintf(text, sizeof text, "%.3fus", ns / 1e3);
  else if (ns < 1000000000)
    std::snprintf(text, sizeof text, "%.3fms", ns / 1e6);
  else
    std::snprintf(text, sizeof text, "%.3fs", ns / 1e9);
  return text;
}

std::string bytes_text(uint64_t bytes) {
  char text[32];
  if (bytes < 1024)
    std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  else if (bytes < (uint64_t{1} << 20))
    std::snprintf(text, sizeof text, "%.2f KiB", bytes / 1024.0);
  else if (bytes < (uint64_t{1} << 30))
    std::snprintf(text, sizeof text, "%.2f MiB", bytes / 1048576.0);
  else
    std::snprintf(text, sizeof text, "%.2f GiB", bytes / 1073741824.0);
  return text;
}

std::string percent_text(int64_t part, int64_t whole) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return text;
}

// `text` padded to `width`: on the left (numbers, right-aligned) or on the right (names).
std::string padded(const std::string& text, std::size_t width, bool right_align) {
  if (text.size() >= width) return text;
  const std::string pad(width - text.size(), ' ');
  return right_align ? pad + text : text + pad;
}

}  // namespace

int64_t EventList::self_ns_sum() const {
  int64_t sum = 0;
  for (const FunctionEventAvg& row : rows_) sum += row.self_ns;
  return sum;
}

std::string EventList::table(const std::string& sort_by, int64_t row_limit) const {
  using Key = int64_t (*)(const FunctionEventAvg&);
  const std::pair<const char*, Key> keys[] = {
      {"total", [](const FunctionEventAvg& r) { return r.total_ns; }},
      {"cpu_time_total", [](const FunctionEventAvg& r) { return r.total_ns; }},
      {"self", [](const FunctionEventAvg& r) { return r.self_ns; }},
      {"self_cpu_time_total", [](const FunctionEventAvg& r) { return r.self_ns; }},
      {"calls", [](const FunctionEventAvg& r) { return r.count; }},
      {"count", [](const FunctionEventAvg& r) { return r.count; }},
      {"bytes", [](const FunctionEventAvg& r) { return static_cast<int64_t>(r.bytes); }},
      {"cpu_memory_usage", [](const FunctionEventAvg& r) { return static_cast<int64_t>(r.bytes); }},
      {"self_bytes", [](const FunctionEventAvg& r) { return static_cast<int64_t>(r.self_bytes); }},
      {"self_cpu_memory_usage",
          [](const FunctionEventAvg& r) { return static_cast<int64_t>(r.self_bytes); }},
  };
  Key key = nullptr;
  for (const auto& [name, k] : keys)
    if (sort_by == name) key = k;
  if (key == nullptr)
    fail<ValueError>("profiler table: unknown sort key '", sort_by,
        "' (total, self, calls, bytes, self_bytes, or torch's cpu_time_total, "
        "self_cpu_time_total, count, cpu_memory_usage, self_cpu_memory_usage)");

  std::vector<const FunctionEventAvg*> sorted;
  for (const FunctionEventAvg& row : rows_) sorted.push_back(&row);
  std::stable_sort(sorted.begin(), sorted.end(), [key](const auto* a, const auto* b) {
    return key(*a) != key(*b) ? key(*a) > key(*b) : a->key < b->key;
  });
  if (row_limit >= 0 && static_cast<int64_t>(sorted.size()) > row_limit) sorted.resize(row_limit);

  // Names longer than the column are cut, as torch's table cuts them ("..." at the end).
  constexpr std::size_t kMaxName = 40;
  std::size_t name_width = 4;
  for (const auto* row : sorted) name_width = std::max(name_width, row->key.size());
  name_width = std::min(name_width, kMaxName);
  const std::size_t widths[] = {name_width, 8, 12, 12, 12, 8, 12, 12};
  const char* headers[] = {
      "Name", "Self %", "Self", "Total", "Total avg", "Calls", "Bytes", "Self bytes"};
  std::size_t line_width = 0;
  for (std::size_t w : widths) line_width += w + 2;
  const std::string rule(line_width - 2, '-');

  std::ostringstream out;
  out << rule << '\n';
  for (std::size_t c = 0; c < 8; ++c)
    out << padded(headers[c], widths[c], c > 0) << (c < 7 ? "  " : "\n");
  out << rule << '\n';
  for (const FunctionEventAvg* row : sorted) {
    std::string name = row->key;
    if (name.size() > name_width) name = name.substr(0, name_width - 3) + "...";
    const std::string cells[] = {name, percent_text(row->self_ns, wall_ns_),
        time_text(row->self_ns), time_text(row->total_ns), time_text(row->average_ns()),
        std::to_string(row->count), bytes_text(row->bytes), bytes_text(row->self_bytes)};
    for (std::size_t c = 0; c < 8; ++c)
      out << padded(cells[c], widths[c], c > 0) << (c < 7 ? "  " : "\n");
  }
  out << rule << '\n';
  const int64_t covered = self_ns_sum();
  out << "Profiled wall time: " << time_text(wall_ns_) << "; the rows' self times add up to "
      << time_text(covered) << " (" << percent_text(covered, wall_ns_) << " of it)\n";
  return out.str();
}

}  // namespace ag::profiler

// The profiler (autograd/profiler.h): nested scopes get exact self and total times, forward and
// backward rows are named after their ops, bytes are counted where they are asked for, the Chrome
// trace is JSON with one complete event per scope, and nothing is recorded unless a profile is.
// No test reads a duration against a threshold: the checks are on the structure, and the
// arithmetic between the clock's readings is exact (integer nanoseconds).
#include <rapidjson/document.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "autograd/autograd.h"
#include "autograd/error.h"
#include "autograd/ops.h"
#include "autograd/profiler.h"

using namespace ag;
using Catch::Matchers::Contains;
namespace profiler = ag::profiler;

namespace {

// Work the optimiser cannot remove, `rounds` times as much in one call as in rounds = 1.
double busy(int64_t rounds) {
  volatile double acc = 0;
  for (int64_t i = 0; i < rounds * 20000; ++i) acc = acc + 1e-9 * static_cast<double>(i % 7);
  return acc;
}

const profiler::FunctionEventAvg* row(const profiler::EventList& list, const std::string& name) {
  for (const auto& r : list.rows())
    if (r.key == name) return &r;
  return nullptr;
}

// Every event's self time equals its duration minus the durations of the events directly inside
// it (found from the times and depths, independently of how the profiler computed self), and
// self ≤ total, bytes likewise.
void check_self_is_total_minus_children(const std::vector<profiler::FunctionEvent>& events) {
  for (const auto& parent : events) {
    int64_t children_ns = 0;
    uint64_t children_bytes = 0;
    const int64_t end = parent.start_ns + parent.duration_ns;
    for (const auto& child : events)
      if (child.depth == parent.depth + 1 && child.start_ns >= parent.start_ns &&
          child.start_ns + child.duration_ns <= end && &child != &parent) {
        children_ns += child.duration_ns;
        children_bytes += child.bytes;
      }
    INFO(parent.name << " at depth " << parent.depth);
    CHECK(parent.self_ns == parent.duration_ns - children_ns);
    CHECK(parent.self_bytes == parent.bytes - children_bytes);
    CHECK(parent.self_ns >= 0);
    CHECK(parent.self_ns <= parent.duration_ns);
  }
}

}  // namespace

TEST_CASE("profiler: nested scopes add up exactly — self excludes the children", "[profiler]") {
  profiler::profile prof;
  {
    profiler::record_function outer("outer");
    busy(1);
    {
      profiler::record_function inner("inner");
      busy(3);
    }
    {
      profiler::record_function inner("inner");
      busy(3);
      profiler::record_function innermost("innermost");
      busy(1);
    }
  }
  prof.stop();
  const std::vector<profiler::FunctionEvent> events = prof.events();
  REQUIRE(events.size() == 4);  // in the order they closed
  CHECK(events[0].name == "inner");
  CHECK(events[1].name == "innermost");
  CHECK(events[2].name == "inner");
  CHECK(events[3].name == "outer");
  CHECK(events[0].depth == 1);
  CHECK(events[1].depth == 2);
  CHECK(events[3].depth == 0);
  for (const auto& e : events) CHECK(e.user_scope);
  check_self_is_total_minus_children(events);

  const profiler::EventList averages = prof.key_averages();
  const auto* outer = row(averages, "outer");
  const auto* inner = row(averages, "inner");
  REQUIRE(outer);
  REQUIRE(inner);
  CHECK(outer->count == 1);
  CHECK(inner->count == 2);
  CHECK(row(averages, "innermost")->count == 1);
  // The self times of everything add up to the outermost scope's total, to the nanosecond, and
  // that is within the profile's wall time.
  CHECK(averages.self_ns_sum() == outer->total_ns);
  CHECK(outer->total_ns <= prof.wall_ns());
  CHECK(inner->self_ns < inner->total_ns);  // innermost ran inside the second one
  CHECK(outer->self_ns < outer->total_ns);
}

TEST_CASE("profiler: forward ops and their backwards are rows of their own", "[profiler]") {
  Tensor a = randn({8, 16}).requires_grad_();
  Tensor b = randn({16, 4}).requires_grad_();
  profiler::profile prof;
  Tensor loss = sum(matmul(a, b));
  loss.backward();
  prof.stop();

  const profiler::EventList averages = prof.key_averages();
  REQUIRE(row(averages, "matmul"));
  REQUIRE(row(averages, "sum"));
  REQUIRE(row(averages, "matmul_backward"));
  REQUIRE(row(averages, "sum_backward"));
  CHECK(row(averages, "sum")->count == 1);
  CHECK(row(averages, "sum_backward")->count == 1);
  CHECK(row(averages, "matmul_backward")->count == 1);
  // matmul's backward takes two products (dA = dC·Bᵀ, dB = Aᵀ·dC): 3 matmul calls in all, two of
  // them inside matmul_backward.
  CHECK(row(averages, "matmul")->count == 3);
  const std::vector<profiler::FunctionEvent> events = prof.events();
  int nested_products = 0;
  for (const auto& e : events) {
    if (e.name == "matmul_backward" || e.name == "sum_backward") {
      CHECK(e.backward);
      CHECK(e.depth == 0);
    }
    if (e.name == "matmul" && e.depth == 1) ++nested_products;
  }
  CHECK(nested_products == 2);
  const auto* backward = row(averages, "matmul_backward");
  CHECK(backward->self_ns < backward->total_ns);
  check_self_is_total_minus_children(events);
  int64_t outermost_ns = 0;
  for (const auto& e : events)
    if (e.depth == 0) outermost_ns += e.duration_ns;
  CHECK(averages.self_ns_sum() == outermost_ns);
  CHECK(outermost_ns <= prof.wall_ns());
}

TEST_CASE("profiler: a custom op's backward carries its name", "[profiler]") {
  Tensor x = randn({4, 4}).requires_grad_();
  profiler::profile prof;
  Tensor y;
  {
    profiler::record_function forward("cube forward");
    y = make_op("cube", x.detach().pow(3), {x}, /*saved=*/{x},
        [x](const Tensor& g, const NeedsGrad&) -> Grads {
          busy(1);
          return {g * 3.0 * x * x};
        });
  }
  sum(y).backward();
  prof.stop();
  const profiler::EventList averages = prof.key_averages();
  REQUIRE(row(averages, "cube_backward"));
  CHECK(row(averages, "cube_backward")->count == 1);
  CHECK(row(averages, "cube forward")->count == 1);
  for (const auto& e : prof.events())
    if (e.name == "cube_backward") CHECK(e.backward);
}

TEST_CASE("profiler: bytes asked for inside a scope are its bytes", "[profiler]") {
  profiler::profile prof;
  Tensor kept_a, kept_b;
  {
    profiler::record_function outer("outer");
    kept_a = zeros({1000});  // 4000 bytes of float32
    {
      profiler::record_function inner("inner");
      kept_b = zeros({250}, float64);  // 2000 bytes
    }
  }
  Tensor x = randn({10, 10});
  Tensor copy = clone(x);  // one (10, 10) float32 buffer: 400 bytes
  prof.stop();
  const profiler::EventList averages = prof.key_averages();
  CHECK(row(averages, "outer")->bytes == 6000);
  CHECK(row(averages, "outer")->self_bytes == 4000);
  CHECK(row(averages, "inner")->bytes == 2000);
  CHECK(row(averages, "clone")->bytes == 400);
  CHECK(row(averages, "clone")->self_bytes == 400);
}

TEST_CASE("profiler: the table is sorted and accounts for the wall time", "[profiler]") {
  profiler::profile prof;
  {
    profiler::record_function big("big");
    busy(4);
  }
  {
    profiler::record_function small("small");
    busy(1);
  }
  { profiler::record_function small("small"); }
  prof.stop();
  const profiler::EventList averages = prof.key_averages();
  const std::string table = averages.table("calls");
  INFO(table);
  // By calls: small (2) above big (1).
  CHECK(table.find("small") < table.find("big"));
  CHECK_THAT(table, Contains("Self %") && Contains("Total avg") && Contains("Self bytes"));
  CHECK_THAT(table, Contains("Profiled wall time: "));
  const std::string top = averages.table("count", 1);  // torch's name for "calls"; one row
  CHECK_THAT(top, Contains("small") && !Contains("big"));
  CHECK_THROWS_AS(averages.table("duration"), ValueError);
}

TEST_CASE("profiler: the Chrome trace is JSON with one complete event per scope", "[profiler]") {
  Tensor a = randn({3, 5}).requires_grad_();
  Tensor b = randn({5, 2});
  profiler::profile prof;
  {
    profiler::record_function step("step \"one\"\\");  // quotes and a backslash, escaped
    sum(matmul(a, b)).backward();
  }
  prof.stop();
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / "ag_test_profiler_trace.json";
  prof.export_chrome_trace(path.string());
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  std::filesystem::remove(path);

  rapidjson::Document trace;
  trace.Parse(text.str().c_str());
  INFO(text.str());
  REQUIRE(!trace.HasParseError());
  REQUIRE(trace.IsObject());
  REQUIRE(trace.HasMember("traceEvents"));
  const auto& events = trace["traceEvents"];
  REQUIRE(events.IsArray());
  std::map<std::string, int> complete;  // name -> "X" events
  double step_start = -1, step_end = -1;
  for (const auto& e : events.GetArray()) {
    REQUIRE(e.HasMember("ph"));
    REQUIRE(e.HasMember("pid"));
    if (std::string(e["ph"].GetString()) != "X") continue;
    REQUIRE(e["ts"].IsNumber());
    REQUIRE(e["dur"].IsNumber());
    REQUIRE(e.HasMember("tid"));
    CHECK(e["dur"].GetDouble() >= 0);
    const std::string name = e["name"].GetString();
    ++complete[name];
    if (name == "step \"one\"\\") {
      step_start = e["ts"].GetDouble();
      step_end = step_start + e["dur"].GetDouble();
      CHECK(std::string(e["cat"].GetString()) == "user_annotation");
    }
  }
  CHECK(complete.size() >= 5);
  CHECK(complete["step \"one\"\\"] == 1);
  CHECK(complete["matmul"] == 2);  // the forward, and dA's product (b needs no gradient)
  CHECK(complete["sum"] == 1);
  CHECK(complete["sum_backward"] == 1);
  CHECK(complete["matmul_backward"] == 1);
  int total = 0;
  for (const auto& [name, count] : complete) total += count;
  CHECK(total == static_cast<int>(prof.events().size()));
  // Every other event lies within the step (ts and dur in µs, to the nanosecond).
  for (const auto& e : events.GetArray())
    if (std::string(e["ph"].GetString()) == "X") {
      CHECK(e["ts"].GetDouble() >= step_start);
      CHECK(e["ts"].GetDouble() + e["dur"].GetDouble() <= step_end + 1e-3);
    }
  CHECK_THROWS_AS(prof.export_chrome_trace("/nonexistent-dir/trace.json"), IoError);
}

TEST_CASE(
    "profiler: off records nothing — one profile at a time, on its own thread", "[profiler]") {
  CHECK_FALSE(profiler::detail::g_recording.load());
  Tensor x = randn({4, 4}).requires_grad_();
  sum(matmul(x, x)).backward();  // before: not recorded
  {
    profiler::record_function before("before");  // opened while off: never recorded
    profiler::profile prof;
    CHECK(prof.recording());
    CHECK(profiler::detail::g_recording.load());
    CHECK_THROWS_AS(profiler::profile(), ValueError);
    // Another thread's ops are not this profile's.
    std::thread other([&] {
      Tensor y = randn({4, 4});
      matmul(y, y);
      profiler::record_function elsewhere("elsewhere");
    });
    other.join();
    prof.stop();
    CHECK_FALSE(prof.recording());
    CHECK_FALSE(profiler::detail::g_recording.load());
    sum(matmul(x, x)).backward();  // after: not recorded
    CHECK(prof.events().empty());
    CHECK(prof.key_averages().rows().empty());
    const int64_t wall = prof.wall_ns();
    CHECK(prof.wall_ns() == wall);  // stopped: the wall time stays
  }
  CHECK_FALSE(profiler::detail::g_recording.load());

  // A scope still open when the profile stops is dropped; its closing later does nothing.
  std::vector<profiler::FunctionEvent> events;
  {
    profiler::profile prof;
    {
      profiler::record_function open("open at stop");
      { profiler::record_function closed("closed"); }
      prof.stop();
    }
    events = prof.events();
    profiler::profile next;  // a new one may start once the first has stopped
    { profiler::record_function again("again"); }
    next.stop();
    REQUIRE(next.events().size() == 1);
    CHECK(next.events()[0].name == "again");
  }
  REQUIRE(events.size() == 1);
  CHECK(events[0].name == "closed");
}

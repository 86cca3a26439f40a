// ag._C._profiler: the profiler of autograd/profiler.h, which python/ag/profiler.py wraps as
// torch.profiler (a context manager, key_averages().table(), export_chrome_trace).
#include <optional>

#include "autograd/profiler.h"
#include "python/src/bindings.h"

namespace ag::python {

namespace {

// A record_function entered and left by a with statement (C++'s is a scope of its own).
class RecordFunctionScope {
 public:
  explicit RecordFunctionScope(std::string name) : name_(std::move(name)) {}
  void enter() { scope_.emplace(name_); }
  void exit() { scope_.reset(); }

 private:
  std::string name_;
  std::optional<profiler::record_function> scope_;
};

}  // namespace

void bind_profiler(py::module_& m) {
  // Times in microseconds and torch's attribute names (FunctionEventAvg's in torch.autograd).
  py::class_<profiler::FunctionEventAvg>(m, "FunctionEventAvg")
      .def_readonly("key", &profiler::FunctionEventAvg::key)
      .def_readonly("count", &profiler::FunctionEventAvg::count)
      .def_property_readonly("self_cpu_time_total",
          [](const profiler::FunctionEventAvg& r) { return r.self_ns / 1e3; })
      .def_property_readonly(
          "cpu_time_total", [](const profiler::FunctionEventAvg& r) { return r.total_ns / 1e3; })
      .def_property_readonly(
          "cpu_time", [](const profiler::FunctionEventAvg& r) { return r.average_ns() / 1e3; })
      .def_readonly("cpu_memory_usage", &profiler::FunctionEventAvg::bytes)
      .def_readonly("self_cpu_memory_usage", &profiler::FunctionEventAvg::self_bytes)
      .def("__repr__", [](const profiler::FunctionEventAvg& r) {
        return "<FunctionEventAvg key=" + r.key + " count=" + std::to_string(r.count) + ">";
      });
  py::class_<profiler::EventList>(m, "EventList")
      .def("table", &profiler::EventList::table, py::arg("sort_by") = "total",
          py::arg("row_limit") = -1)
      .def("rows", &profiler::EventList::rows)
      .def_property_readonly(
          "wall_time_us", [](const profiler::EventList& list) { return list.wall_ns() / 1e3; });
  py::class_<profiler::profile>(m, "Profile")
      .def(py::init<>())
      .def("stop", &profiler::profile::stop)
      .def_property_readonly("recording", &profiler::profile::recording)
      .def_property_readonly(
          "wall_time_us", [](const profiler::profile& p) { return p.wall_ns() / 1e3; })
      .def("key_averages", &profiler::profile::key_averages)
      .def("export_chrome_trace", &profiler::profile::export_chrome_trace, py::arg("path"));
  py::class_<RecordFunctionScope>(m, "RecordFunction")
      .def(py::init<std::string>(), py::arg("name"))
      .def("enter", &RecordFunctionScope::enter)
      .def("exit", &RecordFunctionScope::exit);
}

}  // namespace ag::python

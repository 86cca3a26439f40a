// Files, pictures and gradient checks from Python: ag._C.io (safetensors, .npy, checkpoints),
// ag._C.viz (heatmaps, curves, PNG files) and ag._C._autograd (gradcheck). The Python packages
// ag.io, ag.viz and ag.autograd (python/ag/) wrap them under PyTorch's and d2l's names.
//
// Every call that touches a file releases the GIL once its arguments are C++ values, so a
// notebook's other threads run while ag reads or writes. Paths arrive as str (ag.io turns an
// os.PathLike into one with os.fspath). A damaged file raises ag's error (module.cpp translates
// it): ag.SafetensorsError, ag.NpyError, ag.CheckpointError, all OSError, with ag's message.
#include <pybind11/stl.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "io/checkpoint.h"
#include "io/file.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "python/src/bindings.h"
#include "viz/curves.h"
#include "viz/heatmap.h"
#include "viz/image.h"

namespace ag::python {

namespace {

using NamedList = std::vector<std::pair<std::string, Tensor>>;

// ---- files ----------------------------------------------------------------------------------------

// A dict {name: Tensor} as named tensors in the dict's order; `op` names the caller in the
// TypeError of a key that is not a str or a value that is not an ag.Tensor.
NamedList named_tensors(const py::dict& tensors, const char* op) {
  NamedList out;
  for (auto [key, value] : tensors) {
    if (!py::isinstance<py::str>(key))
      throw py::type_error(std::string(op) + ": tensor names must be str, not " + py_repr(key));
    if (!py::isinstance<Tensor>(value))
      throw py::type_error(std::string(op) + ": the value of '" + key.cast<std::string>() +
                           "' is " + py_repr(py::type::of(value)) + ", not an ag.Tensor");
    out.emplace_back(key.cast<std::string>(), value.cast<Tensor>());
  }
  return out;
}

// safetensors' __metadata__: str to str, as the safetensors package requires.
std::map<std::string, std::string> string_map(const py::object& metadata, const char* op) {
  std::map<std::string, std::string> out;
  if (metadata.is_none()) return out;
  if (!py::isinstance<py::dict>(metadata))
    throw py::type_error(std::string(op) + ": metadata must be a dict of str to str, not " +
                         py_repr(py::type::of(metadata)));
  for (auto [key, value] : metadata.cast<py::dict>()) {
    if (!py::isinstance<py::str>(key) || !py::isinstance<py::str>(value))
      throw py::type_error(std::string(op) + ": metadata must map str to str; got " + py_repr(key) +
                           ": " + py_repr(value));
    out[key.cast<std::string>()] = value.cast<std::string>();
  }
  return out;
}

// A safetensors file read: (list of (name, tensor) in the header's order, metadata dict).
py::tuple safetensors_tuple(Safetensors file) {
  py::list tensors;
  for (auto& [name, tensor] : file.tensors) tensors.append(py::make_tuple(name, tensor));
  return py::make_tuple(tensors, file.metadata);
}

CheckpointFormat checkpoint_format(const std::string& format) {
  if (format == "binary") return CheckpointFormat::binary;
  if (format == "json") return CheckpointFormat::json;
  throw ValueError("save_checkpoint: format must be 'binary' or 'json', not '" + format + "'");
}

void bind_files(py::module_& io) {
  io.def(
      "save_file",
      [](const py::dict& tensors, const std::string& filename, const py::object& metadata) {
        const NamedList named = named_tensors(tensors, "save_file");
        SafetensorsWriteOptions options{string_map(metadata, "save_file")};
        py::gil_scoped_release release;
        write_safetensors(filename, named, options);
      },
      py::arg("tensors"), py::arg("filename"), py::arg("metadata") = py::none(),
      "Writes {name: tensor} as a safetensors file, atomically, each tensor in its own dtype.");
  io.def(
      "save",
      [](const py::dict& tensors, const py::object& metadata) {
        const NamedList named = named_tensors(tensors, "save");
        SafetensorsWriteOptions options{string_map(metadata, "save")};
        std::string bytes;
        {
          py::gil_scoped_release release;
          bytes = serialize_safetensors(named, options);
        }
        return py::bytes(bytes);
      },
      py::arg("tensors"), py::arg("metadata") = py::none(),
      "The bytes of the safetensors file save_file would write.");
  io.def(
      "_load_file",
      [](const std::string& filename) {
        std::optional<Safetensors> file;
        {
          py::gil_scoped_release release;
          file = read_safetensors(filename);
        }
        return safetensors_tuple(std::move(*file));
      },
      py::arg("filename"));
  io.def(
      "_load",
      [](const py::bytes& data, const std::string& source) {
        const std::string_view bytes = data;  // the bytes object outlives the parse
        std::optional<Safetensors> file;
        {
          py::gil_scoped_release release;
          file = parse_safetensors(bytes, source);
        }
        return safetensors_tuple(std::move(*file));
      },
      py::arg("data"), py::arg("source") = "<bytes>");

  io.def(
      "save_npy",
      [](const std::string& file, const Tensor& tensor) {
        py::gil_scoped_release release;
        write_npy(file, tensor);
      },
      py::arg("file"), py::arg("tensor"),
      "Writes the tensor as a NumPy .npy file in its dtype ('<f4', '<f8', '<i8', '|b1').");
  io.def(
      "load_npy",
      [](const std::string& file) {
        py::gil_scoped_release release;
        return read_npy(file);
      },
      py::arg("file"), "Reads a .npy file of float32, float64, int64 or bool (numpy.save's).");

  io.def(
      "_save_checkpoint",
      [](const std::string& path, std::string kind, const py::dict& tensors,
          std::map<std::string, uint64_t> integers, std::map<std::string, double> reals,
          std::map<std::string, std::string> strings, const std::string& format) {
        Checkpoint c;
        c.kind = std::move(kind);
        for (auto& [name, tensor] : named_tensors(tensors, "save_checkpoint"))
          c.tensors[name] = tensor;
        c.integers = std::move(integers);
        c.reals = std::move(reals);
        c.strings = std::move(strings);
        SaveOptions options;
        options.format = checkpoint_format(format);
        py::gil_scoped_release release;
        save_checkpoint(c, path, options);
      },
      py::arg("path"), py::arg("kind"), py::arg("tensors"), py::arg("integers"), py::arg("reals"),
      py::arg("strings"), py::arg("format"));
  io.def(
      "_load_checkpoint",
      [](const std::string& path) {
        std::optional<Checkpoint> c;
        {
          py::gil_scoped_release release;
          c = load_checkpoint(path);
        }
        return py::make_tuple(c->kind, c->tensors, c->integers, c->reals, c->strings);
      },
      py::arg("path"));
  io.def(
      "check_finite",
      [](const std::map<std::string, Tensor>& tensors, const std::string& file) {
        py::gil_scoped_release release;
        check_finite(tensors, file);
      },
      py::arg("tensors"), py::arg("file"),
      "A CheckpointError naming the file, the tensor and the element if any value is NaN or ±Inf.");

  io.def("d2l_name", &d2l_name, py::arg("name"),
      "ag's dotted name as d2l's PyTorch Transformer has it: 'blks.0.' -> 'blks.block0.'.");
  io.def("from_d2l_name", &from_d2l_name, py::arg("name"),
      "d2l's dotted name as ag has it: 'blks.block0.' -> 'blks.0.'.");

  // What ag.viz writes a PNG with, so that saving a picture is as atomic as ag's other files.
  io.def(
      "_write_file",
      [](const std::string& path, const py::bytes& data, const std::string& what) {
        const std::string_view bytes = data;
        py::gil_scoped_release release;
        write_file_atomically(path, bytes, what);
      },
      py::arg("path"), py::arg("data"), py::arg("what"));
}

// ---- pictures -------------------------------------------------------------------------------------

void bind_viz(py::module_& viz) {
  viz.def(
      "_show_heatmaps",
      [](const Tensor& matrices, const std::string& path, viz::ShowHeatmapsOptions options) {
        py::gil_scoped_release release;
        viz::show_heatmaps(matrices, path, options);
      },
      py::arg("matrices"), py::arg("path"), py::arg("options"));
  py::class_<viz::ShowHeatmapsOptions>(viz, "_ShowHeatmapsOptions")
      .def(py::init<>())
      .def_readwrite("xlabel", &viz::ShowHeatmapsOptions::xlabel)
      .def_readwrite("ylabel", &viz::ShowHeatmapsOptions::ylabel)
      .def_readwrite("titles", &viz::ShowHeatmapsOptions::titles)
      .def_readwrite("row_titles", &viz::ShowHeatmapsOptions::row_titles)
      .def_readwrite("row_labels", &viz::ShowHeatmapsOptions::row_labels)
      .def_readwrite("col_labels", &viz::ShowHeatmapsOptions::col_labels)
      .def_readwrite("cell", &viz::ShowHeatmapsOptions::cell);

  py::class_<viz::HeatmapOptions>(viz, "_HeatmapOptions")
      .def(py::init<>())
      .def_readwrite("title", &viz::HeatmapOptions::title)
      .def_readwrite("xlabel", &viz::HeatmapOptions::xlabel)
      .def_readwrite("ylabel", &viz::HeatmapOptions::ylabel)
      .def_readwrite("row_labels", &viz::HeatmapOptions::row_labels)
      .def_readwrite("col_labels", &viz::HeatmapOptions::col_labels)
      .def_readwrite("cell", &viz::HeatmapOptions::cell)
      .def_readwrite("font_scale", &viz::HeatmapOptions::font_scale)
      .def_readwrite("vmin", &viz::HeatmapOptions::vmin)
      .def_readwrite("vmax", &viz::HeatmapOptions::vmax)
      .def_readwrite("colorbar", &viz::HeatmapOptions::colorbar);
  viz.def(
      "_write_heatmap",
      [](const std::string& path, const Tensor& matrix, viz::HeatmapOptions options) {
        py::gil_scoped_release release;
        viz::write_heatmap(path, matrix, options);
      },
      py::arg("path"), py::arg("matrix"), py::arg("options"));

  // Curves y_i(x) sharing one x, drawn by gnuplot: the CSV and the script go beside the PNG.
  viz.def(
      "_plot",
      [](const std::string& csv_path, const std::string& png_path, const std::vector<double>& x,
          const std::vector<std::vector<double>>& ys, const std::vector<std::string>& legend,
          const std::string& xlabel, const std::string& ylabel, const std::string& title,
          std::optional<double> ymin, std::optional<double> ymax, int64_t width, int64_t height,
          bool points) {
        // Columns "x", "y0", "y1", ...: gnuplot reads them by name, the legend titles them.
        std::vector<std::string> header{"x"};
        std::vector<std::vector<double>> columns{x};
        viz::LinePanel panel;
        panel.xlabel = xlabel;
        panel.ylabel = ylabel;
        panel.ymin = ymin;
        panel.ymax = ymax;
        for (std::size_t i = 0; i < ys.size(); ++i) {
          header.push_back("y" + std::to_string(i));
          columns.push_back(ys[i]);
          panel.curves.push_back({header.back(), i < legend.size() ? legend[i] : ""});
        }
        viz::LineFigure figure{
            .panels = {panel}, .title = title, .width = width, .height = height, .points = points};
        py::gil_scoped_release release;
        viz::write_csv(csv_path, header, columns);
        viz::plot_csv(csv_path, png_path, figure);
      },
      py::arg("csv_path"), py::arg("png_path"), py::arg("x"), py::arg("ys"), py::arg("legend"),
      py::arg("xlabel"), py::arg("ylabel"), py::arg("title"), py::arg("ymin"), py::arg("ymax"),
      py::arg("width"), py::arg("height"), py::arg("points"));
  viz.def(
      "gnuplot_problem", [](const std::string& gnuplot) { return viz::gnuplot_problem(gnuplot); },
      py::arg("gnuplot") = "gnuplot",
      "'' when gnuplot can be run (ag.viz.plot needs it), otherwise what is missing.");

  viz.def(
      "read_png",
      [](const std::string& path) {
        std::optional<viz::Image> image;
        {
          py::gil_scoped_release release;
          image = viz::read_png(path);
        }
        const auto& rgb = image->rgb();
        return py::make_tuple(image->width(), image->height(),
            py::bytes(reinterpret_cast<const char*>(rgb.data()), rgb.size()));
      },
      py::arg("path"), "A PNG file as (width, height, RGB bytes row by row, top row first).");
}

// ---- gradcheck ----------------------------------------------------------------------------------

// What func returned, as the one float64 tensor ag's gradcheck differentiates: a tensor as it
// is; a tuple or list of them (PyTorch's functions of several outputs) flattened and
// concatenated, leaving out int64 and bool outputs (indices, masks), which have no gradient.
Tensor gradcheck_output(const py::object& out) {
  if (py::isinstance<Tensor>(out)) return out.cast<Tensor>();
  if (!py::isinstance<py::tuple>(out) && !py::isinstance<py::list>(out))
    throw py::type_error("gradcheck: func must return a tensor or a tuple of tensors, not " +
                         py_repr(py::type::of(out)));
  std::vector<Tensor> flat;
  for (py::handle item : out) {
    if (!py::isinstance<Tensor>(item))
      throw py::type_error("gradcheck: func returned a tuple holding " +
                           py_repr(py::type::of(item)) + "; every output must be an ag.Tensor");
    const Tensor t = item.cast<Tensor>();
    if (is_floating_point(t.dtype())) flat.push_back(reshape(t, {-1}));
  }
  if (flat.empty())
    throw py::type_error("gradcheck: func returned no floating-point tensor to differentiate");
  return flat.size() == 1 ? flat[0] : concat(flat, 0);
}

GradcheckOptions gradcheck_options(
    double eps, double atol, double rtol, uint64_t seed, int64_t max_failures, bool allow_unused) {
  if (!(eps > 0)) throw ValueError("gradcheck: eps must be positive, got " + std::to_string(eps));
  if (!(atol >= 0) || !(rtol >= 0))
    throw ValueError("gradcheck: atol and rtol must be non-negative");
  return {eps, atol, rtol, seed, max_failures, allow_unused};
}

void bind_gradcheck(py::module_& autograd) {
  py::class_<GradcheckResult>(autograd, "GradcheckResult",
      "What a gradient check found: passed, message (one line per problem), failed_elements.")
      .def_readonly("passed", &GradcheckResult::passed)
      .def_readonly("message", &GradcheckResult::message)
      .def_readonly("failed_elements", &GradcheckResult::failed_elements)
      .def("__bool__", [](const GradcheckResult& r) { return r.passed; })
      .def("__repr__", [](const GradcheckResult& r) {
        return r.passed ? std::string("GradcheckResult(passed=True)")
                        : "GradcheckResult(passed=False, failed_elements=" +
                              std::to_string(r.failed_elements) + ")";
      });

  // The Python function is called from C++ under the GIL (gil_scoped_acquire), with the GIL
  // released around the whole check. A Python exception inside it (error_already_set) passes
  // through gradcheck, which restores what it perturbed, and comes out in Python as itself.
  //
  // func(*args), as PyTorch calls it: each tensor of `args` that requires grad is replaced by
  // gradcheck's float64 leaf copy, which it perturbs; everything else — tensors that do not
  // require grad (a float32 constant, indices, a mask), numbers — passes as it is. ag's C++ check
  // receives one tensor per position (an empty int64 one where nothing is checked), so that its
  // "input i" is the i-th argument.
  autograd.def(
      "_gradcheck",
      [](py::function func, py::tuple args, double eps, double atol, double rtol, uint64_t seed,
          int64_t max_failures, bool allow_unused) {
        std::vector<Tensor> inputs;
        std::vector<bool> checked;
        for (py::handle arg : args) {
          const bool is_checked = py::isinstance<Tensor>(arg) && arg.cast<Tensor>().requires_grad();
          inputs.push_back(is_checked ? arg.cast<Tensor>() : zeros({0}, int64));
          checked.push_back(is_checked);
        }
        const GradcheckOptions options =
            gradcheck_options(eps, atol, rtol, seed, max_failures, allow_unused);
        auto function = held(std::move(func));
        auto arguments = held(std::move(args));
        GradcheckFn f = [function, arguments, checked](const std::vector<Tensor>& leaves) {
          py::gil_scoped_acquire gil;
          py::list call_args(*arguments);  // a copy of the arguments' list
          for (std::size_t i = 0; i < checked.size(); ++i)
            if (checked[i]) call_args[i] = py::cast(leaves[i]);
          return gradcheck_output((*function)(*call_args));
        };
        py::gil_scoped_release release;
        return gradcheck(f, inputs, options);
      },
      py::arg("func"), py::arg("args"), py::arg("eps"), py::arg("atol"), py::arg("rtol"),
      py::arg("seed"), py::arg("max_failures"), py::arg("allow_unused"));

  autograd.def(
      "_gradcheck_parameters",
      [](py::function func, NamedTensors parameters, double eps, double atol, double rtol,
          uint64_t seed, int64_t max_failures, bool allow_unused) {
        const GradcheckOptions options =
            gradcheck_options(eps, atol, rtol, seed, max_failures, allow_unused);
        auto function = held(std::move(func));
        auto f = [function]() {
          py::gil_scoped_acquire gil;
          return gradcheck_output((*function)());
        };
        py::gil_scoped_release release;
        return gradcheck_parameters(f, parameters, options);
      },
      py::arg("func"), py::arg("parameters"), py::arg("eps"), py::arg("atol"), py::arg("rtol"),
      py::arg("seed"), py::arg("max_failures"), py::arg("allow_unused"));
}

}  // namespace

// ag._C.io, ag._C.viz and ag._C._autograd (underscored: `from ._C import *` in ag/__init__.py
// must not put it where the package ag.autograd goes).
void bind_io(py::module_& m) {
  py::module_ io = m.def_submodule("io", "safetensors, .npy and checkpoint files (io/)");
  bind_files(io);
  py::module_ viz = m.def_submodule("viz", "heatmaps, curves and PNG files (viz/)");
  bind_viz(viz);
  py::module_ autograd = m.def_submodule("_autograd", "gradcheck (autograd/gradcheck.h)");
  bind_gradcheck(autograd);
}

}  // namespace ag::python

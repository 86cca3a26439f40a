// Tensor printing, following PyTorch's torch/_tensor_str.py so that ag and PyTorch print the same
// values the same way: 4 decimals ("0.1000"), integers as "1.", scientific notation when the
// magnitudes span more than 1000× or leave [1e-4, 1e8), right-aligned columns, 80-character lines,
// and only the first and last 3 items of each dim once a tensor has more than 1000 elements.
// int64 and bool elements print as Python prints them ("42", "True"), right-aligned.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "autograd/autograd.h"

namespace ag {

namespace {

constexpr int kPrecision = 4;
constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int kLineWidth = 80;

// printf's %.*f and %.*e match Python's "{:.4f}" and "{:.4e}" digit for digit.
std::string fixed(double value, int precision) {
  char buffer[400];  // room for %f of the largest double
  std::snprintf(buffer, sizeof buffer, "%.*f", precision, value);
  return buffer;
}
std::string scientific(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*e", kPrecision, value);
  return buffer;
}

// How each printed element looks, all in one width (PyTorch's _Formatter); elements are named by
// their row-major index.
class Formatter {
 public:
  virtual ~Formatter() = default;
  virtual std::size_t width() const = 0;
  virtual std::string format(int64_t index) const = 0;
};

// Floating point: one notation for every printed element.
class FloatFormatter : public Formatter {
 public:
  // `values` are all elements; `shown` the indices of those printed.
  FloatFormatter(const std::vector<double>& all, const std::vector<int64_t>& shown_indices)
      : all_(all) {
    std::vector<double> values;
    for (int64_t i : shown_indices) values.push_back(all[static_cast<std::size_t>(i)]);
    double lo = INFINITY, hi = 0;
    bool any = false;
    for (double v : values) {
      if (!std::isfinite(v) || v == 0) continue;
      any = true;
      lo = std::min(lo, std::abs(v));
      hi = std::max(hi, std::abs(v));
      if (v != std::ceil(v)) int_mode_ = false;
    }
    if (!any) return;
    sci_mode_ = hi / lo > 1000.0 || hi > 1.0e8 || (!int_mode_ && lo < 1.0e-4);
    for (double v : values) {
      if (!std::isfinite(v) || v == 0) continue;
      std::size_t length = sci_mode_   ? scientific(v).size()
                           : int_mode_ ? fixed(v, 0).size() + 1  // + 1 for the trailing "."
                                       : fixed(v, kPrecision).size();
      width_ = std::max(width_, length);
    }
  }

  std::size_t width() const override { return width_; }

  std::string format(int64_t index) const override {
    const double v = all_[static_cast<std::size_t>(index)];
    std::string s;
    if (std::isnan(v)) {
      s = "nan";
    } else if (std::isinf(v)) {
      s = v > 0 ? "inf" : "-inf";
    } else if (sci_mode_) {
      s = scientific(v);
    } else if (int_mode_) {
      s = fixed(v, 0) + ".";
    } else {
      s = fixed(v, kPrecision);
    }
    return std::string(width_ > s.size() ? width_ - s.size() : 0, ' ') + s;
  }

 private:
  const std::vector<double>& all_;
  bool int_mode_ = true;
  bool sci_mode_ = false;
  std::size_t width_ = 1;
};

// int64 and bool: Python's str of each element ("-3", "True"), right-aligned to the widest shown.
class TextFormatter : public Formatter {
 public:
  TextFormatter(std::vector<std::string> all, const std::vector<int64_t>& shown_indices)
      : all_(std::move(all)) {
    for (int64_t i : shown_indices)
      width_ = std::max(width_, all_[static_cast<std::size_t>(i)].size());
  }
  std::size_t width() const override { return width_; }
  std::string format(int64_t index) const override {
    const std::string& s = all_[static_cast<std::size_t>(index)];
    return std::string(width_ - s.size(), ' ') + s;
  }

 private:
  std::vector<std::string> all_;
  std::size_t width_ = 1;
};

struct Printer {
  const Shape& shape;
  bool summarize;

  // Indices of dim d that are shown: all, or the first and last kEdgeItems.
  std::vector<int64_t> shown(std::size_t d) const {
    std::vector<int64_t> indices;
    const int64_t n = shape[d];
    const bool cut = summarize && n > 2 * kEdgeItems;
    for (int64_t i = 0; i < n; ++i)
      if (!cut || i < kEdgeItems || i >= n - kEdgeItems) indices.push_back(i);
    return indices;
  }

  int64_t stride(std::size_t d) const {
    int64_t s = 1;
    for (std::size_t k = d + 1; k < shape.size(); ++k) s *= shape[k];
    return s;
  }

  // The indices of the elements that will be printed (PyTorch's get_summarized_data), to size the
  // columns.
  void collect(std::size_t d, int64_t base, std::vector<int64_t>& out) const {
    if (d == shape.size()) {
      out.push_back(base);
      return;
    }
    for (int64_t i : shown(d)) collect(d + 1, base + i * stride(d), out);
  }

  std::string render(std::size_t d, int64_t base, std::size_t indent, const Formatter& f) const {
    if (shape.empty()) return f.format(0);
    const bool cut = summarize && shape[d] > 2 * kEdgeItems;
    std::vector<std::string> items;
    for (int64_t i : shown(d)) {
      if (cut && i == shape[d] - kEdgeItems)
        items.push_back(d + 1 == shape.size() ? " ..." : "...");
      items.push_back(d + 1 == shape.size() ? f.format(base + i)
                                            : render(d + 1, base + i * stride(d), indent + 1, f));
    }
    std::string out = "[";
    if (d + 1 == shape.size()) {
      // A row: as many items per line as fit in the line width.
      const std::size_t per_line =
          std::max<std::size_t>(1, (kLineWidth - indent) / (f.width() + 2));
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i > 0 && i % per_line == 0) {
          out += ",\n";
          out.append(indent + 1, ' ');
        } else if (i > 0) {
          out += ", ";
        }
        out += items[i];
      }
    } else {
      // Sub-tensors: one per line, separated by (dims left − 1) blank lines.
      std::string separator = ",";
      separator.append(shape.size() - d - 1, '\n');
      separator.append(indent + 1, ' ');
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += separator;
        out += items[i];
      }
    }
    return out + "]";
  }
};

std::string shape_tuple(const Shape& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace

std::string Tensor::str() const {
  const std::string prefix = "tensor(";
  const std::size_t indent = prefix.size();
  std::vector<std::string> suffixes;
  std::string body;
  if (numel() == 0) {
    body = "[]";
    if (dim() != 1) suffixes.push_back("size=" + shape_tuple(shape()));
  } else {
    Printer printer{shape(), numel() > kThreshold};
    std::vector<int64_t> shown;
    printer.collect(0, 0, shown);
    if (is_floating_point(dtype())) {
      const std::vector<double> values = to_vector<double>();
      body = printer.render(0, 0, indent, FloatFormatter(values, shown));
    } else {
      std::vector<std::string> text;
      if (dtype() == bool_) {
        for (bool b : to_vector<bool>()) text.emplace_back(b ? "True" : "False");
      } else {
        for (int64_t v : to_vector<int64_t>()) text.push_back(std::to_string(v));
      }
      body = printer.render(0, 0, indent, TextFormatter(std::move(text), shown));
    }
  }
  // As PyTorch: float32 (the default dtype), int64 and bool go without saying — except in an empty
  // tensor, which shows no element to tell them by.
  const bool implied =
      dtype() == float32 || (numel() > 0 && (dtype() == int64 || dtype() == bool_));
  if (!implied) suffixes.push_back(std::string("dtype=") + dtype_name(dtype()));
  if (grad_fn())
    suffixes.push_back(std::string("grad_fn=<") + grad_fn()->name() + ">");
  else if (requires_grad())
    suffixes.push_back("requires_grad=True");

  // Suffixes go on the last line while it stays within the line width (PyTorch's _add_suffixes).
  std::string out = prefix + body;
  const std::size_t newline = out.rfind('\n');
  std::size_t last_line = newline == std::string::npos ? out.size() + 2 : out.size() - newline + 1;
  for (const std::string& suffix : suffixes) {
    if (last_line + suffix.size() + 2 > static_cast<std::size_t>(kLineWidth)) {
      out += ",\n" + std::string(indent, ' ') + suffix;
      last_line = indent + suffix.size();
    } else {
      out += ", " + suffix;
      last_line += suffix.size() + 2;
    }
  }
  return out + ")";
}

}  // namespace ag

#include "nn/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>

#include "autograd/ops.h"

namespace ag::nn {

std::string with_commas(int64_t n) {
  // the magnitude in unsigned arithmetic, where −(−2⁶³) fits
  const uint64_t magnitude = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
  std::string digits = std::to_string(magnitude), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (n < 0 ? "-" : "") + out;
}

namespace {

std::string num(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4g", value);
  return buffer;
}

// A table with left-aligned text columns and right-aligned number columns, each as wide as its
// widest cell, separated by two spaces.
class Table {
 public:
  Table(std::vector<std::string> header, std::vector<bool> right_aligned)
      : right_(std::move(right_aligned)) {
    rows_.push_back(std::move(header));
  }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string str() const {
    std::vector<std::size_t> width(right_.size(), 0);
    for (const auto& row : rows_)
      for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
    std::size_t total = 0;
    for (std::size_t w : width) total += w + 2;
    std::string out;
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      std::string line;
      for (std::size_t c = 0; c < rows_[r].size(); ++c) {
        const std::string pad(width[c] - rows_[r][c].size(), ' ');
        line += (c ? "  " : "") + (right_[c] ? pad + rows_[r][c] : rows_[r][c] + pad);
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
      if (r == 0) out += std::string(total - 2, '-') + "\n";
    }
    return out;
  }

 private:
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

// ‖x‖ from squared_norm_partials, added in block order as optim::clip_grad_norm adds them.
double norm_of(const std::vector<double>& partials) {
  double sum = 0;
  for (double s : partials) sum += s;
  return std::sqrt(sum);
}

}  // namespace

std::string summary(const Module& module) {
  Table table({"module", "type", "own parameters", "own", "with children"},
      {false, false, false, true, true});
  // A tied tensor (nanoGPT's lm_head.weight = wte.weight) is a parameter of each module that holds
  // it, and each row counts it; the total counts it once, under the name it is listed by first.
  std::map<const void*, std::string> first_name;
  for (const auto& [name, p] : module.named_parameters()) first_name.emplace(p.identity(), name);
  std::vector<std::string> ties;  // "lm_head.weight is wte.weight"
  // Depth first, parents before children, in registration order — the order of named_parameters.
  std::function<void(const std::string&, const Module&)> visit = [&](const std::string& name,
                                                                     const Module& m) {
    std::string own_list;
    int64_t own = 0;
    // A module's own parameters are those of its named_parameters without a dot (names cannot
    // contain dots; nested modules' parameters are "child.name").
    for (const auto& [param_name, p] : m.named_parameters()) {
      if (param_name.find('.') != std::string::npos) continue;
      own_list += (own_list.empty() ? "" : ", ") + param_name + " " + shape_str(p.shape());
      own += p.numel();
      const std::string full_name = name.empty() ? param_name : name + "." + param_name;
      const std::string& first = first_name.at(p.identity());
      if (first != full_name) {
        own_list += " (= " + first + ")";
        ties.push_back(full_name + " is " + first);
      }
    }
    table.add({name.empty() ? "(root)" : name, m.type_name(), own_list.empty() ? "-" : own_list,
        with_commas(own), with_commas(m.num_parameters())});
    for (const auto& [child_name, child] : m.named_children())
      visit(name.empty() ? child_name : name + "." + child_name, *child);
  };
  visit("", module);
  // Buffers: persistent ones are in every state dict; the others (a positional-encoding table)
  // the module computes, and only ag's own checkpoints carry them.
  int64_t buffer_elements = 0, persistent_elements = 0;
  for (const auto& [name, b] : module.named_buffers()) buffer_elements += b.numel();
  for (const auto& [name, b] : module.named_buffers(/*persistent_only=*/true))
    persistent_elements += b.numel();
  std::string out = module.type_name() + " summary\n" + table.str();
  out += "total parameters: " + with_commas(module.num_parameters()) + "\n";
  for (const std::string& tie : ties) out += "tied: " + tie + " (counted once in the total)\n";
  out += "buffer elements (not trained): " + with_commas(persistent_elements) + " persistent, " +
         with_commas(buffer_elements - persistent_elements) +
         " computed by the module (not persistent)\n";
  return out;
}

GradNormReport grad_norms(const Module& module) {
  GradNormReport report;
  double total_sq = 0;
  for (const auto& [name, p] : module.named_parameters()) {
    ParamGradNorm row{name, p.shape(), p.grad().defined(), 0.0, norm_of(squared_norm_partials(p))};
    if (row.has_grad) {
      const std::vector<double> partials = squared_norm_partials(p.grad());
      for (double s : partials) total_sq += s;  // clip_grad_norm's order of additions
      row.grad_norm = norm_of(partials);
    }
    report.params.push_back(std::move(row));
  }
  report.total_norm = std::sqrt(total_sq);
  return report;
}

std::string grad_norm_summary(const Module& module) {
  const GradNormReport report = grad_norms(module);
  Table table({"parameter", "shape", "|grad|", "|param|", "|grad|/|param|"},
      {false, false, true, true, true});
  for (const ParamGradNorm& row : report.params) {
    if (!row.has_grad) {
      table.add({row.name, shape_str(row.shape), "no grad", num(row.param_norm), "-"});
      continue;
    }
    table.add({row.name, shape_str(row.shape), num(row.grad_norm), num(row.param_norm),
        row.param_norm > 0 ? num(row.grad_norm / row.param_norm) : "-"});
  }
  return table.str() +
         "total gradient norm (what optim::clip_grad_norm clips): " + num(report.total_norm) + "\n";
}

}  // namespace ag::nn

// nn::summary (layers and parameter counts) and nn::grad_norms / grad_norm_summary (gradient norms
// per parameter, with the total that optim::clip_grad_norm clips).
#include <catch2/catch.hpp>

#include <limits>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>

#include "nn_test_util.h"
#include "optim/optimizer.h"

using namespace ag;
using Catch::Matchers::Contains;

namespace {

// A small d2l Transformer encoder: vocab 10, width 8, FFN 16, 2 heads, 2 blocks.
nn::TransformerEncoder small_encoder() {
  return nn::TransformerEncoder(10, 8, 8, 8, 8, {8}, 8, 16, 2, 2, 0.0);
}

std::string commas(
    int64_t n) {  // 12345 -> "12,345", written out independently of the code under test
  const std::string digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    out.push_back(digits[i]);
    const std::size_t left = digits.size() - 1 - i;
    if (left > 0 && left % 3 == 0) out.push_back(',');
  }
  return out;
}

// The numbers of a summary line's last two columns ("own" and "with children").
std::pair<int64_t, int64_t> counts_of(const std::string& line) {
  std::istringstream words(line);
  std::vector<std::string> all;
  for (std::string w; words >> w;) all.push_back(w);
  auto parse = [](std::string w) {
    std::erase(w, ',');
    return std::stoll(w);
  };
  return {parse(all[all.size() - 2]), parse(all.back())};
}

}  // namespace

TEST_CASE("summary marks a tied weight in each holder's row and counts it once in the total",
    "[nn][summary][sharing]") {
  nn_test::TiedLM m;  // lm_head.weight = wte.weight, (5, 3)
  const std::string text = nn::summary(m);
  INFO(text);
  std::istringstream lines(text);
  std::map<std::string, std::string> row;  // first word -> line
  for (std::string line; std::getline(lines, line);) row[line.substr(0, line.find(' '))] = line;
  CHECK(counts_of(row.at("(root)")) == std::pair<int64_t, int64_t>{0, 15});
  CHECK(counts_of(row.at("wte")) == std::pair<int64_t, int64_t>{15, 15});
  CHECK_THAT(row.at("wte"), !Contains("(="));
  CHECK(counts_of(row.at("lm_head")) == std::pair<int64_t, int64_t>{15, 15});  // its own weight
  CHECK_THAT(row.at("lm_head"), Contains("weight [5,3] (= wte.weight)"));
  CHECK_THAT(text, Contains("total parameters: 15\n"
                            "tied: lm_head.weight is wte.weight (counted once in the total)\n"));
  // An untied model has no such line.
  CHECK_THAT(nn::summary(small_encoder()), !Contains("tied:"));
}

TEST_CASE("summary lists every module with its own parameters and the total", "[nn][summary]") {
  ag::manual_seed(0);
  nn::TransformerEncoder encoder = small_encoder();
  const std::string text = nn::summary(encoder);
  INFO(text);
  CHECK_THAT(text, Contains("TransformerEncoder summary"));
  CHECK_THAT(text, Contains("total parameters: " + commas(encoder.num_parameters()) + "\n"));
  // PositionalEncoding's table (1, 1000, 8) is a buffer the module computes: not persistent.
  CHECK_THAT(text, Contains("buffer elements (not trained): 0 persistent, 8,000 computed by the "
                            "module (not persistent)"));

  // One line per module, in named_parameters order, and the own counts add up to the total.
  std::istringstream lines(text);
  std::string line;
  std::getline(lines, line);  // title
  std::getline(lines, line);  // header
  CHECK_THAT(line, Contains("module") && Contains("own parameters"));
  std::getline(lines, line);  // ----
  std::vector<std::string> modules;
  int64_t own_total = 0;
  while (std::getline(lines, line) && line.rfind("total parameters", 0) != 0) {
    modules.push_back(line.substr(0, line.find(' ')));
    own_total += counts_of(line).first;
    if (modules.back() == "(root)") CHECK(counts_of(line).second == encoder.num_parameters());
    if (modules.back() == "blks.1.attention.W_q") {
      CHECK_THAT(line, Contains("Linear") && Contains("weight [8,8]"));
      CHECK(counts_of(line) == std::pair<int64_t, int64_t>{64, 64});
    }
    if (modules.back() == "blks.0.addnorm1.ln") CHECK_THAT(line, Contains("weight [8], bias [8]"));
    if (modules.back() == "blks.0")
      CHECK(counts_of(line).second == encoder.blks->at<nn::Module>(0)->num_parameters());
  }
  CHECK(own_total == encoder.num_parameters());
  REQUIRE(modules.size() >= 4);
  CHECK(modules[0] == "(root)");
  CHECK(modules[1] == "embedding");
  CHECK(modules[2] == "pos_encoding");
  CHECK(std::count(modules.begin(), modules.end(), "blks.1.ffn.dense2") == 1);
  CHECK(nn::summary(encoder) == text);  // deterministic
}

TEST_CASE("grad_norms: per-parameter norms, and the total equals optim::clip_grad_norm's",
    "[nn][summary]") {
  ag::manual_seed(1);
  nn::TransformerEncoder encoder = small_encoder();
  Tensor tokens = nn_test::tokens({3, 5}, 10, 7);
  Tensor valid_lens = tensor({5, 3, 1});
  Tensor out = encoder(tokens, valid_lens);  // (3, 5, 8)
  (out * nn_test::randn32(out.shape(), 3)).sum().backward();

  // A parameter no gradient reaches: say so, and leave it out of the total as clipping does.
  Tensor unused = encoder.named_parameters().back().second;
  unused.zero_grad();

  const nn::GradNormReport report = nn::grad_norms(encoder);
  const auto named = encoder.named_parameters();
  REQUIRE(report.params.size() == named.size());
  double sum_sq = 0;
  for (std::size_t i = 0; i < named.size(); ++i) {
    const nn::ParamGradNorm& row = report.params[i];
    CHECK(row.name == named[i].first);
    CHECK(row.shape == named[i].second.shape());
    double g2 = 0, p2 = 0;
    if (named[i].second.grad().defined())
      for (double g : named[i].second.grad().to_vector<double>()) g2 += g * g;
    for (double p : named[i].second.to_vector<double>()) p2 += p * p;
    CHECK(row.has_grad == named[i].second.grad().defined());
    CHECK(row.grad_norm == Approx(std::sqrt(g2)).epsilon(1e-12));
    CHECK(row.param_norm == Approx(std::sqrt(p2)).epsilon(1e-12));
    sum_sq += g2;
  }
  CHECK_FALSE(report.params.back().has_grad);
  CHECK(report.total_norm > 0);
  CHECK(report.total_norm == Approx(std::sqrt(sum_sq)).epsilon(1e-12));

  const std::string table = nn::grad_norm_summary(encoder);
  INFO(table);
  CHECK_THAT(table, Contains("blks.0.attention.W_q.weight") && Contains("[8,8]"));
  CHECK_THAT(table, Contains(named.back().first) && Contains("no grad"));

  // What clipping computes, to the last bit (a max_norm far above the total clips nothing).
  const double clip_total = optim::clip_grad_norm(encoder.parameters(), 1e30);
  CHECK(report.total_norm == clip_total);
  char total[32];
  std::snprintf(total, sizeof total, "%.4g", clip_total);
  CHECK_THAT(table,
      Contains(std::string("total gradient norm (what optim::clip_grad_norm clips): ") + total));
}

TEST_CASE("with_commas groups a count's digits by three, as Python's f\"{n:,}\"", "[summary]") {
  CHECK(nn::with_commas(0) == "0");
  CHECK(nn::with_commas(999) == "999");
  CHECK(nn::with_commas(1000) == "1,000");
  CHECK(nn::with_commas(1234567) == "1,234,567");
  CHECK(nn::with_commas(-1234) == "-1,234");
  CHECK(nn::with_commas(std::numeric_limits<int64_t>::min()) == "-9,223,372,036,854,775,808");
}

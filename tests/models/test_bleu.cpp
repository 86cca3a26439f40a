// BLEU (models/seq2seq_bleu.h) against d2l's own Python bleu() on fixed sentence pairs
// (fixtures/make_bleu_fixtures.py), and what ag does where d2l's Python cannot go.
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/error.h"
#include "models/seq2seq_bleu.h"

using namespace ag;
using namespace ag::seq2seq;

namespace {
#include "fixtures/bleu_fixtures.inc"
}  // namespace

TEST_CASE("bleu agrees with d2l's Python on every fixed pair for k = 1 to 4", "[bleu]") {
  int checked = 0;
  for (const BleuFixture& f : bleu_fixtures)
    for (int64_t k = 1; k <= 4; ++k) {
      INFO("pred '" << f.pred << "', label '" << f.label << "', k " << k);
      CHECK(std::abs(bleu(f.pred, f.label, k) - f.bleu[k - 1]) <= 1e-12);
      ++checked;
    }
  CHECK(checked >= 120);  // 30 pairs or more, 4 values each
}

TEST_CASE("bleu splits as Python's str.split(' ')", "[bleu]") {
  CHECK(split_on_spaces("") == std::vector<std::string>{""});
  CHECK(split_on_spaces("va !") == std::vector<std::string>{"va", "!"});
  CHECK(split_on_spaces(" a  b ") == std::vector<std::string>{"", "a", "", "b", ""});
}

TEST_CASE("bleu of the token lists: d2l's worked numbers", "[bleu]") {
  // Label A B C D E F, prediction A B B C D: p1 = 4/5, p2 = 3/4, p3 = 1/3, p4 = 0 (d2l's example).
  const std::vector<std::string> label{"A", "B", "C", "D", "E", "F"}, pred{"A", "B", "B", "C", "D"};
  const double penalty = std::exp(1.0 - 6.0 / 5.0);
  CHECK(bleu(pred, label, 1) == Approx(penalty * std::pow(0.8, 0.5)).epsilon(1e-15));
  CHECK(bleu(pred, label, 3) ==
        Approx(penalty * std::pow(0.8, 0.5) * std::pow(0.75, 0.25) * std::pow(1.0 / 3, 0.125))
            .epsilon(1e-15));
  CHECK(bleu(pred, label, 4) == 0.0);
  CHECK(bleu(label, label, 4) == 1.0);
}

TEST_CASE("bleu of an empty prediction is 0 — k below 1 is refused", "[bleu]") {
  const std::vector<std::string> nothing, label{"il", "est", "calme", "."};
  CHECK(bleu(nothing, label, 2) == 0.0);  // d2l: ZeroDivisionError
  CHECK(bleu(nothing, nothing, 1) == 0.0);
  CHECK_THROWS_AS(bleu(label, label, 0), ValueError);
  CHECK_THROWS_WITH(bleu("va !", "va !", -1), Catch::Matchers::Contains("bleu: k = -1"));
}

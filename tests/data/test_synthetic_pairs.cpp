// The generated parallel corpus (data/synthetic_pairs.h): fra.txt's format, determinism, distinct
// sources, sentence lengths, and the grammar's articles, word counts and vocabulary sizes.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <sstream>

#include "autograd/error.h"
#include "data/synthetic_pairs.h"
#include "data/text.h"

using namespace ag;
using namespace ag::data;

namespace {

struct Line {
  std::string source, target;
};
std::vector<Line> lines_of(const std::string& text) {
  std::vector<Line> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t tab = line.find('\t');
    REQUIRE(tab != std::string::npos);
    REQUIRE(line.find('\t', tab + 1) == std::string::npos);
    lines.push_back({line.substr(0, tab), line.substr(tab + 1)});
  }
  return lines;
}

}  // namespace

TEST_CASE("synthetic pairs: fra.txt's format, deterministic for a seed", "[synthetic_pairs]") {
  const std::string text = synthetic_pairs_text(300, 7);
  CHECK(text == synthetic_pairs_text(300, 7));
  CHECK(text != synthetic_pairs_text(300, 8));
  CHECK(text.back() == '\n');
  const std::vector<Line> lines = lines_of(text);
  REQUIRE(lines.size() == 300);
  std::set<std::string> sources;
  for (const Line& l : lines) {
    sources.insert(l.source);
    for (const std::string* side : {&l.source, &l.target}) {
      INFO(*side);
      CHECK(std::isupper(static_cast<unsigned char>((*side)[0])));
      CHECK(side->back() == '.');
      CHECK(side->find(" .") == std::string::npos);  // the full stop against the last word
    }
  }
  CHECK(sources.size() == 300);  // distinct: a held-out slice is never trained on
  // A smaller count is a prefix of a larger one of the same seed.
  const std::string ten = synthetic_pairs_text(10, 7);
  CHECK(text.compare(0, ten.size(), ten) == 0);
}

TEST_CASE("synthetic pairs: 3 to 9 words a side, Lingo only reorders", "[synthetic_pairs]") {
  std::map<std::string, std::string> definite = {{"lo", ""}, {"la", ""}, {"li", ""}, {"le", ""}};
  std::size_t shortest = 100, longest = 0;
  for (const Line& l : lines_of(synthetic_pairs_text(500, 1))) {
    const auto source = tokenize_words(preprocess_nmt(l.source));
    const auto target = tokenize_words(preprocess_nmt(l.target));
    INFO(l.source << " | " << l.target);
    CHECK(source.size() == target.size());
    shortest = std::min(shortest, source.size());
    longest = std::max(longest, source.size());
    auto count = [](const std::vector<std::string>& words, std::set<std::string> of) {
      int64_t n = 0;
      for (const std::string& w : words) n += of.count(w);
      return n;
    };
    // Every article has its Lingo article: the, a/an, some.
    CHECK(count(source, {"the"}) == count(target, {"lo", "la", "li", "le"}));
    CHECK(count(source, {"a", "an"}) == count(target, {"un", "una"}));
    CHECK(count(source, {"some"}) == count(target, {"unos", "unas"}));
    // The verb agrees: a Lingo sentence's verb (last before ".") ends in "en" for a plural
    // subject, whose English verb has no -s ("dogs see", "the dog sees").
    const std::string& lingo_verb = target[target.size() - 2];
    const bool plural_lingo = lingo_verb.size() > 2 && lingo_verb.ends_with("en");
    bool plural_english = false;
    for (const std::string& w : source)
      for (const char* v : {"see", "like", "sleep", "run", "swim", "want", "carry", "cry"})
        plural_english = plural_english || w == v;
    if (plural_english) CHECK(plural_lingo);
  }
  CHECK(shortest == 3);
  CHECK(longest == 9);
}

TEST_CASE("synthetic pairs: a few hundred words a side, each seen twice", "[synthetic_pairs]") {
  std::vector<std::string> source, target;
  for (const Line& l : lines_of(synthetic_pairs_text(5000, 0))) {
    for (auto& w : tokenize_words(preprocess_nmt(l.source))) source.push_back(w);
    for (auto& w : tokenize_words(preprocess_nmt(l.target))) target.push_back(w);
  }
  // d2l's min_freq 2 keeps nearly every word of a corpus this size.
  const Vocab source_vocab(source, 2), target_vocab(target, 2);
  CHECK(source_vocab.size() > 200);
  CHECK(source_vocab.size() < 260);
  CHECK(target_vocab.size() > 280);
  CHECK(target_vocab.size() < 340);
  CHECK(Vocab(target, 0).size() - target_vocab.size() < 10);
}

TEST_CASE("synthetic pairs: a count outside 1 to 1,000,000 is refused", "[synthetic_pairs]") {
  CHECK_THROWS_AS(synthetic_pairs_text(0, 0), ValueError);
  CHECK_THROWS_WITH(
      synthetic_pairs_text(1000001, 0), Catch::Matchers::Contains("count 1000001 is outside"));
}

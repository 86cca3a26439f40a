// d2l's Vocab (ids by frequency, ties by first appearance, min_freq, reserved tokens), its text
// form for model files and that form's strict parser, and truncate_pad.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "autograd/error.h"
#include "data/text.h"

using namespace ag;
using namespace ag::data;
using Catch::Matchers::Contains;

namespace {

using Tokens = std::vector<std::string>;
using Freqs = std::vector<std::pair<std::string, int64_t>>;

std::string deserialize_error(const std::string& text) {
  try {
    Vocab::deserialize(text, "m.safetensors");
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("Vocab numbers tokens by frequency, ties in order of first appearance", "[data][vocab]") {
  // Counts: b 3, a 2, c 2, d 1, e 1 — a before c and d before e, as they first appear.
  const Tokens corpus = {"b", "a", "c", "b", "d", "a", "c", "e", "b"};
  const Vocab vocab(corpus);
  CHECK(vocab.id_to_token() == Tokens{"<unk>", "b", "a", "c", "d", "e"});
  CHECK(vocab.token_freqs() == Freqs{{"b", 3}, {"a", 2}, {"c", 2}, {"d", 1}, {"e", 1}});
  CHECK(vocab.size() == 6);
  CHECK(vocab.unk() == 0);
  CHECK(vocab.id("c") == 3);
  CHECK(vocab.id("zzz") == vocab.unk());
  CHECK(vocab.contains("e"));
  CHECK_FALSE(vocab.contains("zzz"));
  CHECK(vocab.ids({"a", "x", "b"}) == std::vector<int64_t>{2, 0, 1});
  CHECK(vocab.token(5) == "e");
  CHECK(vocab.tokens({1, 0, 4}) == Tokens{"b", "<unk>", "d"});
  CHECK_THROWS_WITH(
      vocab.token(6), Contains("Vocab::token: id 6 is out of range for a vocabulary of 6 tokens"));
  CHECK_THROWS_AS(vocab.token(-1), ValueError);
  CHECK_THROWS_AS(vocab.tokens({1, 9}), ValueError);
}

TEST_CASE("Vocab keeps reserved tokens first and stops at min_freq", "[data][vocab]") {
  const Tokens corpus = {"x", "<pad>", "y", "x", "z", "y", "x", "<unk>"};
  const Vocab vocab(corpus, 2, {"<pad>", "<bos>", "<eos>"});
  // x 3, y 2 kept; <pad> is reserved already; z 1 < 2 stops the loop.
  CHECK(vocab.id_to_token() == Tokens{"<unk>", "<pad>", "<bos>", "<eos>", "x", "y"});
  CHECK(vocab.token_freqs() == Freqs{{"x", 3}, {"y", 2}, {"<pad>", 1}, {"z", 1}, {"<unk>", 1}});
  CHECK(vocab.id("z") == 0);
  // d2l's loop breaks at the first count below min_freq, so nothing after it is added.
  CHECK(Vocab(Tokens{"a", "a", "b"}, 3).id_to_token() == Tokens{"<unk>"});
  CHECK(Vocab(Tokens{}).id_to_token() == Tokens{"<unk>"});
  CHECK(Vocab(Tokens{"", " ", "\n", ""}).id_to_token() == Tokens{"<unk>", "", " ", "\n"});
  CHECK_THROWS_WITH(Vocab(corpus, -1), Contains("Vocab: min_freq must be >= 0, got -1"));
  CHECK_THROWS_WITH(Vocab(corpus, 0, {"<pad>", "<pad>"}),
      Contains("Vocab: the reserved token '<pad>' is given twice"));
  CHECK_THROWS_WITH(
      Vocab(corpus, 0, {"<unk>"}), Contains("'<unk>' is <unk>, which is always id 0"));
  // From views counted by a TokenCounter: the same vocabulary.
  TokenCounter counter;
  for (const std::string_view token : std::vector<std::string_view>(corpus.begin(), corpus.end()))
    counter.add(token);
  CHECK(Vocab(counter, 2, {"<pad>", "<bos>", "<eos>"}).id_to_token() == vocab.id_to_token());
  // A braced list of tokens picks the std::string constructor.
  CHECK(Vocab({"a", "b", "b"}, 0, {"<pad>"}).id_to_token() ==
        std::vector<std::string>{"<unk>", "<pad>", "b", "a"});
}

TEST_CASE("Vocab copies and moves keep their lookups", "[data][vocab]") {
  Vocab original(Tokens{"a", "b", "b"});
  Vocab copy = original;
  Vocab moved = std::move(original);
  CHECK(copy.id("b") == 1);
  CHECK(moved.id("a") == 2);
  copy = Vocab(Tokens{"q"});
  CHECK(copy.id("q") == 1);
  CHECK(copy.id("b") == 0);
}

TEST_CASE("Vocab::from_tokens_in_id_order rebuilds a model's vocabulary", "[data][vocab]") {
  const Vocab vocab = Vocab::from_tokens_in_id_order({"<unk>", "<pad>", "hello", " "});
  CHECK(vocab.id("hello") == 2);
  CHECK(vocab.id(" ") == 3);
  CHECK(vocab.token_freqs().empty());
  CHECK_THROWS_WITH(
      Vocab::from_tokens_in_id_order({"a", "<unk>"}), Contains("id 0 must be <unk>, got 'a'"));
  CHECK_THROWS_WITH(Vocab::from_tokens_in_id_order({}), Contains("got no tokens"));
  CHECK_THROWS_WITH(Vocab::from_tokens_in_id_order({"<unk>", "a", "b", "a"}),
      Contains("the token 'a' at id 3 is also id 1"));
}

TEST_CASE("Vocab::serialize and deserialize round-trip any tokens", "[data][vocab]") {
  const Tokens corpus = {"a", " ", "\n", "\\", "\\n", "", "\xC3\xA9", "a", "line\nbreak", "\r\t"};
  const Vocab vocab(corpus, 0, {"<pad>"});
  const std::string text = vocab.serialize();
  CHECK(text.rfind("ag-vocab 1 11\n<unk>\n<pad>\na\n \n\\n\n\\\\\n\\\\n\n\n", 0) == 0);
  const Vocab back = Vocab::deserialize(text, "m");
  CHECK(back.id_to_token() == vocab.id_to_token());
  CHECK(back.serialize() == text);
  CHECK(Vocab::deserialize("ag-vocab 1 1\n<unk>\n", "m").size() == 1);
}

TEST_CASE(
    "Vocab::deserialize refuses anything malformed, naming the source and byte", "[data][vocab]") {
  CHECK(deserialize_error("ag-vocab 1 2\n<unk>\n<unk>\n") ==
        "Vocab::deserialize: m.safetensors: token 1 '<unk>' is also token 0 at byte 19");
  CHECK(deserialize_error("ag-vocab 1 2\na\n<unk>\n") ==
        "Vocab::deserialize: m.safetensors: token 0 is 'a', not <unk> at byte 13");
  CHECK_THAT(deserialize_error(""), Contains("not a vocabulary") && Contains("at byte 0"));
  CHECK_THAT(deserialize_error("ag-vocab 2 1\n<unk>\n"), Contains("not a vocabulary"));
  CHECK_THAT(deserialize_error("ag-vocab 1 1"), Contains("no newline after the token count"));
  for (const std::string count : {"", "x", "0", "-1", "+1", "01", "1 ", "99999999999999999999"})
    CHECK_THAT(deserialize_error("ag-vocab 1 " + count + "\n<unk>\n"),
        Contains("is not a whole number >= 1 at byte 11"));
  CHECK_THAT(deserialize_error("ag-vocab 1 7\n<unk>\n"),
      Contains("the token count 7 is more than the 6 bytes that follow can hold"));
  CHECK_THAT(deserialize_error("ag-vocab 1 2\n<unk>\na"),
      Contains("token 1 of 2 has no newline (the text ends) at byte 20"));
  CHECK_THAT(deserialize_error("ag-vocab 1 2\n<unk>\na\\t\n"),
      Contains("a bad escape (only \\\\ and \\n are escapes) in token 1 at byte 20"));
  CHECK_THAT(deserialize_error("ag-vocab 1 2\n<unk>\na\\"), Contains("a bad escape"));
  CHECK_THAT(deserialize_error("ag-vocab 1 1\n<unk>\nmore\n"),
      Contains("5 bytes follow the last of the 1 tokens at byte 19"));
  CHECK_THAT(deserialize_error("ag-vocab 1 2\n<unk>\n\xC3\n"),
      Contains("m.safetensors: invalid UTF-8 at byte 19 (line 3)"));
}

TEST_CASE("truncate_pad is d2l's", "[data][vocab]") {
  // d2l: truncate_pad(src_vocab[source[0]], 10, src_vocab['<pad>'])
  CHECK(truncate_pad({47, 4}, 10, 1) == std::vector<int64_t>{47, 4, 1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(truncate_pad({1, 2, 3, 4}, 2, 0) == std::vector<int64_t>{1, 2});
  CHECK(truncate_pad({1, 2}, 2, 0) == std::vector<int64_t>{1, 2});
  CHECK(truncate_pad({}, 0, 0).empty());
  CHECK_THROWS_WITH(truncate_pad({1}, -1, 0), Contains("truncate_pad: num_steps must be >= 0"));
}

TEST_CASE("TokenCounter and the id encoders agree with the token lists", "[data][vocab]") {
  const std::string text = "Les \xC3\xA9t\xC3\xA9s, l'\xC3\xA9t\xC3\xA9 !\n\xF0\x9F\x98\x80 a  b";
  TokenCounter chars;
  chars.add("\xC3\xA9");  // one token added directly, then the text: counts continue
  chars.add_chars(text);
  chars.add("s");
  std::vector<std::string> char_tokens = tokenize_chars(text);
  char_tokens.insert(char_tokens.begin(), "\xC3\xA9");
  char_tokens.push_back("s");
  const Vocab from_list(char_tokens, 0, {"<pad>"});
  const Vocab from_counter(chars, 0, {"<pad>"});
  CHECK(from_counter.id_to_token() == from_list.id_to_token());
  CHECK(from_counter.token_freqs() == from_list.token_freqs());
  CHECK(from_counter.char_ids(text) == from_counter.ids(tokenize_chars(text)));
  CHECK(from_counter.char_ids("\xE2\x82\xAC~") == std::vector<int64_t>{0, 0});  // unknown
  CHECK_THROWS_WITH(chars.add_chars("\xC3"), Contains("TokenCounter::add_chars: <text>: invalid"));
  CHECK_THROWS_AS(from_counter.char_ids("\xFF"), ValueError);

  const std::string line = preprocess_nmt(text);
  TokenCounter words;
  words.add_words(line);
  words.add_words("a b");
  std::vector<std::string> word_tokens = tokenize_words(line);
  for (const std::string& w : tokenize_words("a b")) word_tokens.push_back(w);
  CHECK(Vocab(words, 1).id_to_token() == Vocab(word_tokens, 1).id_to_token());
  CHECK(Vocab(words).token_freqs() == Vocab(word_tokens).token_freqs());
  const Vocab word_vocab(words);
  CHECK(word_vocab.word_ids(line) == word_vocab.ids(tokenize_words(line)));
  CHECK(word_vocab.word_ids("") == std::vector<int64_t>{word_vocab.id("")});
  CHECK_THROWS_WITH(words.add_words("\xC0\x80"), Contains("TokenCounter::add_words"));
  CHECK_THROWS_WITH(word_vocab.word_ids("\xC0\x80"), Contains("Vocab::word_ids"));
}

TEST_CASE("Vocab's table finds every token as it grows", "[data][vocab]") {
  // 20000 distinct tokens, token i appearing (i % 3) + 1 times: the table grows past 2^15 slots.
  std::vector<std::string> corpus;
  for (int i = 0; i < 20000; ++i) {
    const std::string token = std::string("t").append(std::to_string(i));
    for (int k = 0; k <= i % 3; ++k) corpus.push_back(token);
  }
  const Vocab vocab(corpus, 2);
  CHECK(vocab.size() == 1 + 13333);  // <unk>, then the tokens seen twice or three times
  for (int64_t id = 0; id < vocab.size(); ++id) CHECK(vocab.id(vocab.token(id)) == id);
  CHECK(vocab.token(1) == "t2");  // the first token seen three times
  CHECK(vocab.id("t0") == 0);     // seen once: below min_freq
  CHECK(vocab.id("t20000") == 0);
  const Vocab copy = vocab;
  CHECK(copy.id("t19999") == vocab.id("t19999"));
}

TEST_CASE("Vocab::serialize refuses a token its deserialize would refuse", "[data][vocab]") {
  using Catch::Matchers::Contains;
  for (const std::string& bad :
      {std::string("b\0c", 3), std::string("\xff"), std::string("\xc3")}) {
    const ag::data::Vocab vocab(std::vector<std::string>{"a", bad, "a"});
    INFO(bad.size());
    CHECK_THROWS_WITH(vocab.serialize(), Contains("Vocab::serialize: token 2"));
  }
  const ag::data::Vocab good(std::vector<std::string>{"a", "\\", "\n", "é"});
  CHECK(ag::data::Vocab::deserialize(good.serialize(), "test").id_to_token() == good.id_to_token());
}

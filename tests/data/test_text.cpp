// UTF-8 and the tokenizers: decoding and its errors, character tokens, d2l's preprocess_nmt with
// Python's lower case, and word tokens split as Python's str.split(' ').
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "autograd/error.h"
#include "data/text.h"

using namespace ag;
using namespace ag::data;
using Catch::Matchers::Contains;

TEST_CASE("decode_utf8 gives code points and encode_utf8 gives them back", "[data][text]") {
  const std::string text = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\n";  // a é € 😀 newline
  const std::u32string code_points = decode_utf8(text);
  CHECK(code_points == std::u32string{U'a', 0xE9, 0x20AC, 0x1F600, U'\n'});
  CHECK(encode_utf8(code_points) == text);
  CHECK(decode_utf8("").empty());
  // The edges of each length and of the code space.
  const std::u32string edges = {
      0x01, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF};
  CHECK(decode_utf8(encode_utf8(edges)) == edges);
  CHECK(encode_utf8(edges).size() == 2 * 1 + 2 * 2 + 4 * 3 + 2 * 4);
  CHECK_THROWS_WITH(encode_utf8(std::u32string{U'a', 0xD800}),
      Contains("encode_utf8: code point 1 is U+D800, a UTF-16 surrogate"));
  CHECK_THROWS_WITH(encode_utf8(std::u32string{0x110000}), Contains("U+110000, beyond U+10FFFF"));
  CHECK(count_code_points(text) == 5);
}

TEST_CASE("decode_utf8 refuses what is not UTF-8, naming the byte and the line", "[data][text]") {
  const auto message = [](const std::string& bytes, const std::string& source = "<text>") {
    try {
      decode_utf8(bytes, source);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message("ab\xC0\x80") ==
        "decode_utf8: <text>: invalid UTF-8 at byte 2 (line 1): overlong encoding C0 80");
  CHECK(message("x\n\ny\xE0\x80\x80", "f.txt") ==
        "decode_utf8: f.txt: invalid UTF-8 at byte 4 (line 3): overlong encoding E0 80");
  CHECK_THAT(message("\xF0\x80\x80\x80"), Contains("byte 0 (line 1): overlong encoding F0 80"));
  CHECK_THAT(message("\xC1\xBF"), Contains("overlong encoding C1 BF"));
  CHECK_THAT(message("a\xED\xA0\x80"), Contains("byte 1 (line 1): a UTF-16 surrogate"));
  CHECK_THAT(message("\xF4\x90\x80\x80"), Contains("a code point beyond U+10FFFF F4 90"));
  CHECK_THAT(message("\xF5\x80\x80\x80"), Contains("a code point beyond U+10FFFF F5"));
  CHECK_THAT(message("\xFF"), Contains("a byte that never occurs in UTF-8 FF"));
  CHECK_THAT(message("ab\x80"), Contains("byte 2 (line 1): a continuation byte without a lead"));
  CHECK_THAT(message("ab\xE2\x82"), Contains("byte 2 (line 1): a sequence cut short by the end"));
  CHECK_THAT(message("\xE2\x82x"),
      Contains("byte 0 (line 1): a sequence cut short (a byte that is not a continuation"));
  CHECK_THAT(message(std::string("a\nb\0c", 5)),
      Contains("byte 3 (line 2): a NUL byte (a binary file, not text) 00"));
  CHECK_THROWS_AS(decode_utf8("\xC3"), ValueError);
}

TEST_CASE("tokenize_chars gives one token per code point", "[data][text]") {
  CHECK(
      tokenize_chars("n\xC3\xA9 !\n") == std::vector<std::string>{"n", "\xC3\xA9", " ", "!", "\n"});
  CHECK(tokenize_chars("").empty());
  CHECK(tokenize_chars("\xF0\x9F\x98\x80") == std::vector<std::string>{"\xF0\x9F\x98\x80"});
  const std::string text = "ab\xE2\x82\xAC";
  const auto views = tokenize_char_views(text);
  REQUIRE(views.size() == 3);
  CHECK(views[2] == "\xE2\x82\xAC");
  CHECK(views[2].data() == text.data() + 2);  // a view into the text, not a copy
  CHECK_THROWS_WITH(tokenize_chars("ab\xC3"), Contains("tokenize_chars: <text>: invalid UTF-8"));
}

TEST_CASE("lower_case is Python's str.lower() on European scripts", "[data][text]") {
  // The expected strings are Python 3.11's 'ÉCOLE À ŒUVRE ÇA ...'.lower().
  CHECK(lower_case("\xC3\x89"
                   "COLE \xC3\x80 \xC5\x92UVRE \xC3\x87"
                   "A") ==
        "\xC3\xA9"
        "cole \xC3\xA0 \xC5\x93uvre \xC3\xA7"
        "a");  // école à œuvre ça
  CHECK(lower_case("\xD0\x9F\xD0\xA0\xD0\x98\xD0\x92\xD0\x95\xD0\xA2") ==
        "\xD0\xBF\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82");  // ПРИВЕТ -> привет
  CHECK(lower_case("\xCE\x91\xCE\x98\xCE\x97\xCE\x9D\xCE\x91") ==
        "\xCE\xB1\xCE\xB8\xCE\xB7\xCE\xBD\xCE\xB1");  // ΑΘΗΝΑ -> αθηνα
  // Final sigma: 'ΟΔΟΣ ΣΑΣ. Σ ΑΣ\'Β'.lower() == "οδος σας. σ ασ'β"
  CHECK(lower_case("\xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3 \xCE\xA3\xCE\x91\xCE\xA3. \xCE\xA3 "
                   "\xCE\x91\xCE\xA3'\xCE\x92") ==
        "\xCE\xBF\xCE\xB4\xCE\xBF\xCF\x82 \xCF\x83\xCE\xB1\xCF\x82. \xCF\x83 "
        "\xCE\xB1\xCF\x83'\xCE\xB2");
  // İ becomes i + COMBINING DOT ABOVE (SpecialCasing.txt), as in Python.
  CHECK(lower_case("\xC4\xB0") == "i\xCC\x87");
  CHECK(lower_case("ABC xyz 123") == "abc xyz 123");
  CHECK_THROWS_WITH(lower_case("\xFF"), Contains("lower_case: <text>: invalid UTF-8 at byte 0"));
}

TEST_CASE("preprocess_nmt is d2l's", "[data][text]") {
  // d2l's own example line, and what its preprocess_nmt prints for it.
  CHECK(preprocess_nmt("Go.\tVa !\nHi.\tSalut !\nRun!\tCours\xE2\x80\xAF!") ==
        "go .\tva !\nhi .\tsalut !\nrun !\tcours !");
  // U+00A0 and U+202F become spaces (so no second space is inserted before the '!').
  CHECK(preprocess_nmt("Oui\xC2\xA0!") == "oui !");
  // A space before , . ! ? unless one is there already; never at the very start.
  CHECK(preprocess_nmt(".Hello,World!?") == ".hello ,world ! ?");
  CHECK(preprocess_nmt("a ,b") == "a ,b");
  CHECK(preprocess_nmt("\xC3\x89T\xC3\x89.") == "\xC3\xA9t\xC3\xA9 .");  // ÉTÉ. -> été .
  CHECK(preprocess_nmt("").empty());
  CHECK_THROWS_WITH(preprocess_nmt("a\xC3"), Contains("preprocess_nmt: <text>: invalid UTF-8"));
}

TEST_CASE("tokenize_words splits on each space as Python's split(' ')", "[data][text]") {
  CHECK(tokenize_words("go .") == std::vector<std::string>{"go", "."});
  CHECK(tokenize_words("a  b") == std::vector<std::string>{"a", "", "b"});
  CHECK(tokenize_words(" a ") == std::vector<std::string>{"", "a", ""});
  CHECK(tokenize_words("") == std::vector<std::string>{""});
  CHECK(tokenize_words("a\tb\nc") == std::vector<std::string>{"a\tb\nc"});  // only ' ' splits
  CHECK(tokenize_word_views("x y") == std::vector<std::string_view>{"x", "y"});
  CHECK_THROWS_AS(tokenize_words("\xC0\x80"), ValueError);
}

// ag-bench-text: how fast the text layer tokenizes and builds a vocabulary, in MB of UTF-8 per
// second, on Debian's fortunes corpus and on generated texts of several sizes (linear scaling
// shows as the same MB/s at every size).
//
//   ag-bench-text [--sizes 10,30,100] [--repeats 3] [--fortunes DIR] [--lists]
//
// Stages, each timed alone (best of --repeats; the thread's CPU time, so that other processes on
// a shared machine do not count), MB/s = input bytes / 1e6 / time:
//   chars count    TokenCounter::add_chars over the text, then Vocab(counter) — the character
//                  vocabulary of nanoGPT's shakespeare_char / ag-train --task lm
//   chars ids      Vocab::char_ids(text) — the whole text as ids
//   preprocess     d2l's preprocess_nmt(text) (lower case, no-break spaces, spaces before , . ! ?)
//   words count    TokenCounter::add_words on every line of the preprocessed text, then Vocab
//                  (d2l's tokenize_nmt + Vocab)
//   words ids      Vocab::word_ids on every line
// --lists also times the list API on the fortunes corpus (Vocab(tokenize_chars(text)) and
// Vocab(tokenize_words(line)...)), the code a reader of d2l writes first.
//
// The generated texts are words of the fortunes corpus (split on white space, so with their
// punctuation and capitals) drawn uniformly from its list of word occurrences — so with the
// corpus's own word frequencies — by ag::Generator(0), 12 words a line: the same bytes on every
// run. Without the fortunes package, the words are 5000 made-up lower-case ones.
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/error.h"
#include "autograd/generator.h"
#include "data/text.h"
#include "main_catching.h"

namespace {

using namespace ag;
using namespace ag::data;

// The CPU time of this thread: the stages run on one thread, and on a shared machine other
// processes' time must not count.
double thread_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

template <class F>
double best_seconds(int repeats, F&& run) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const double start = thread_seconds();
    run();
    best = std::min(best, thread_seconds() - start);
  }
  return best;
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::vector<std::string> word_pool(const std::string& corpus) {
  std::vector<std::string> words;
  std::size_t at = 0;
  while (at < corpus.size()) {
    const std::size_t start = corpus.find_first_not_of(" \t\n", at);
    if (start == std::string::npos) break;
    std::size_t end = corpus.find_first_of(" \t\n", start);
    if (end == std::string::npos) end = corpus.size();
    words.push_back(corpus.substr(start, end - start));
    at = end;
  }
  if (!words.empty()) return words;
  Generator g(1);  // no corpus: 5000 made-up words of 1–9 letters
  for (int i = 0; i < 5000; ++i) {
    std::string word;
    const int64_t length = g.randint(1, 10);
    for (int64_t j = 0; j < length; ++j) word += static_cast<char>('a' + g.randint(0, 26));
    words.push_back(word);
  }
  return words;
}

std::string generate(const std::vector<std::string>& words, std::size_t bytes) {
  Generator g(0);
  std::string text;
  text.reserve(bytes + 64);
  int64_t in_line = 0;
  while (text.size() < bytes) {
    text += words[static_cast<std::size_t>(g.randint(0, static_cast<int64_t>(words.size())))];
    text += ++in_line % 12 == 0 ? '\n' : ' ';
  }
  return text;
}

struct Result {
  double chars_count, chars_ids, preprocess, words_count, words_ids;  // seconds
  int64_t char_vocab, word_vocab;
};

Result measure(const std::string& text, int repeats) {
  Result r{};
  r.chars_count = best_seconds(repeats, [&] {
    TokenCounter counter;
    counter.add_chars(text);
    r.char_vocab = Vocab(counter).size();
  });
  const Vocab chars = [&] {
    TokenCounter counter;
    counter.add_chars(text);
    return Vocab(counter);
  }();
  r.chars_ids = best_seconds(repeats, [&] {
    if (chars.char_ids(text).size() > text.size()) fail<ValueError>("impossible");
  });
  std::string preprocessed;
  r.preprocess = best_seconds(repeats, [&] { preprocessed = preprocess_nmt(text); });
  const std::vector<std::string_view> lines = lines_of(preprocessed);
  r.words_count = best_seconds(repeats, [&] {
    TokenCounter counter;
    for (const std::string_view line : lines) counter.add_words(line);
    r.word_vocab = Vocab(counter).size();
  });
  const Vocab words = [&] {
    TokenCounter counter;
    for (const std::string_view line : lines) counter.add_words(line);
    return Vocab(counter);
  }();
  r.words_ids = best_seconds(repeats, [&] {
    std::size_t n = 0;
    for (const std::string_view line : lines) n += words.word_ids(line).size();
    if (n > preprocessed.size() + lines.size()) fail<ValueError>("impossible");
  });
  return r;
}

void print_row(const std::string& name, std::size_t bytes, const Result& r) {
  const double mb = static_cast<double>(bytes) / 1e6;
  std::printf("| %-14s | %7.1f | %9.0f | %9.0f | %10.0f | %9.0f | %9.0f | %6lld | %8lld |\n",
      name.c_str(), mb, mb / r.chars_count, mb / r.chars_ids, mb / r.preprocess, mb / r.words_count,
      mb / r.words_ids, static_cast<long long>(r.char_vocab), static_cast<long long>(r.word_vocab));
  std::fflush(stdout);
}

}  // namespace

static int run_program(int argc, char** argv) {
  CLI::App app{"ag-bench-text: tokenizing and building vocabularies, MB/s"};
  std::vector<int> sizes = {10, 30, 100};
  int repeats = 3;
  std::string fortunes = "/usr/share/games/fortunes";
  bool lists = false;
  app.add_option("--sizes", sizes, "sizes of the generated texts, in MB")->delimiter(',');
  app.add_option("--repeats", repeats, "timed runs of each stage (the best is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--fortunes", fortunes, "the fortunes folder");
  app.add_flag("--lists", lists, "also time the list API on the fortunes corpus");
  CLI11_PARSE(app, argc, argv);

  std::string corpus;
  try {
    corpus = read_fortunes(fortunes).text;
  } catch (const IoError& e) {
    std::printf("(no fortunes corpus: %s)\n", e.what());
  }
  std::printf("MB/s of UTF-8 input (thread CPU time), best of %d\n\n", repeats);
  std::printf("| %-14s | %7s | %9s | %9s | %10s | %9s | %9s | %6s | %8s |\n", "text", "MB",
      "chars cnt", "chars ids", "preprocess", "words cnt", "words ids", "chars", "words");
  std::printf(
      "|----------------|--------:|----------:|----------:|-----------:|----------:|"
      "----------:|-------:|---------:|\n");
  if (!corpus.empty()) print_row("fortunes", corpus.size(), measure(corpus, repeats));
  const std::vector<std::string> words = word_pool(corpus);
  for (const int size : sizes) {
    if (size < 1) fail<ValueError>("--sizes must be >= 1 MB, got ", size);
    const std::string text = generate(words, static_cast<std::size_t>(size) * 1000000);
    print_row("generated", text.size(), measure(text, repeats));
  }
  if (lists && !corpus.empty()) {
    const double mb = static_cast<double>(corpus.size()) / 1e6;
    const double chars = best_seconds(repeats, [&] { Vocab v(tokenize_chars(corpus)); });
    const std::string preprocessed = preprocess_nmt(corpus);
    const std::vector<std::string_view> lines = lines_of(preprocessed);
    const double word_lists = best_seconds(repeats, [&] {
      std::vector<std::string> tokens;
      for (const std::string_view line : lines)
        for (std::string& w : tokenize_words(line)) tokens.push_back(std::move(w));
      Vocab v(tokens);
    });
    std::printf(
        "\nlist API on fortunes: Vocab(tokenize_chars(text)) %.0f MB/s, "
        "Vocab(tokenize_words of every line) %.0f MB/s\n",
        mb / chars, mb / word_lists);
  }
  return 0;
}

int main(int argc, char** argv) {
  return bench::main_catching("ag-bench-text", run_program, argc, argv);
}

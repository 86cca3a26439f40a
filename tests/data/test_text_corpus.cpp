// Text files, Debian's fortunes layout, sentence pairs and their bad inputs; nanoGPT's random
// windows and d2l's translation batches. Every file is written by the test into a temp folder.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "autograd/error.h"
#include "data/text.h"
#include "tests/temp_folder.h"

using namespace ag;
using namespace ag::data;
using ag::testing::TempFolder;
using Catch::Matchers::Contains;

namespace {

std::string write(const TempFolder& folder, const std::string& name, const std::string& bytes) {
  const std::string path = folder.file(name);
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::vector<int64_t> row(const Tensor& t, int64_t b) {
  std::vector<int64_t> out;
  for (float v : t.select(0, b).to_vector<float>()) out.push_back(static_cast<int64_t>(v));
  return out;
}

std::vector<int64_t> values(const Tensor& t) {
  std::vector<int64_t> out;
  for (float v : t.to_vector<float>()) out.push_back(static_cast<int64_t>(v));
  return out;
}

}  // namespace

TEST_CASE(
    "read_text_files reads files and folders in order, skipping symlinks", "[data][text_corpus]") {
  TempFolder folder;
  const std::string one = write(folder, "one.txt", "first\r\nline\rtwo\n");
  write(folder, "dir/b.txt", "B");
  write(folder, "dir/a0.txt", "A0");
  write(folder, "dir/a/z.txt", "AZ");  // "dir/a/z.txt" < "dir/a0.txt" in byte order
  std::filesystem::create_symlink(one, folder.file("dir/link.txt"));
  std::filesystem::create_directory_symlink(folder.file("dir/a"), folder.file("dir/linked_dir"));

  const TextCorpus corpus = read_text_files({one, folder.file("dir")});
  CHECK(corpus.text == "first\nline\ntwo\nAZA0B");  // universal newlines, as Python reads
  CHECK(corpus.files == std::vector<std::string>{one, folder.file("dir/a/z.txt"),
                            folder.file("dir/a0.txt"), folder.file("dir/b.txt")});
  // A symbolic link named explicitly is read.
  CHECK(read_text_files({folder.file("dir/link.txt")}).text == "first\nline\ntwo\n");
}

TEST_CASE(
    "read_text_files names the file, byte and line of what is not text", "[data][text_corpus]") {
  TempFolder folder;
  const std::string bad = write(folder, "bad.txt", "ok\nstill ok\nno \xC3(");
  CHECK_THROWS_WITH(read_text_files({bad}),
      "read_text_files: " + bad +
          ": invalid UTF-8 at byte 15 (line 3): a sequence cut short (a byte that is not a "
          "continuation byte follows) C3");
  const std::string binary = write(folder, "image.png", std::string("\x89PNG\r\n\x1a\n\0\0", 10));
  CHECK_THROWS_WITH(read_text_files({binary}), Contains("image.png: invalid UTF-8 at byte 0"));
  const std::string nul = write(folder, "nul.txt", std::string("text\0more", 9));
  CHECK_THROWS_WITH(read_text_files({nul}),
      Contains("nul.txt: invalid UTF-8 at byte 4 (line 1): a NUL byte (a binary file, not text)"));
  const std::string empty = write(folder, "empty.txt", "");
  CHECK_THROWS_WITH(read_text_files({empty}), "read_text_files: " + empty + " is an empty file");
  CHECK_THROWS_AS(read_text_files({empty}), IoError);
  CHECK_THROWS_WITH(read_text_files({folder.file("missing.txt")}),
      "read_text_files: " + folder.file("missing.txt") + " does not exist");
  std::filesystem::create_directory(folder.file("only_links"));
  std::filesystem::create_symlink(bad, folder.file("only_links/l.txt"));
  CHECK_THROWS_WITH(read_text_files({folder.file("only_links")}),
      Contains("the folder " + folder.file("only_links") + " holds no regular files"));
  CHECK_THROWS_WITH(read_text_files({}), "read_text_files: no paths given");
  CHECK_THROWS_AS(read_text_files({}), ValueError);
  CHECK_THROWS_WITH(read_text_files({"/dev/null"}), Contains("/dev/null is not a regular file"));
}

TEST_CASE("read_fortunes reads fortunes' layout: no .dat, no symlinks, name order",
    "[data][text_corpus]") {
  TempFolder folder;
  write(folder, "zen", "Z\n%\n");
  write(folder, "art", "A\n%\n");
  write(folder, "art.dat", std::string("\0\0\0\2", 4));
  write(folder, "off/rude", "not read: fortunes' own subfolders are not part of the corpus");
  std::filesystem::create_symlink(folder.file("art"), folder.file("art.u8"));
  const TextCorpus corpus = read_fortunes(folder.path.string());
  CHECK(corpus.text == "A\n%\nZ\n%\n");
  CHECK(corpus.files == std::vector<std::string>{folder.file("art"), folder.file("zen")});
  CHECK_THROWS_WITH(
      read_fortunes(folder.file("none")), Contains("read_fortunes: " + folder.file("none") +
                                                   " does not exist: install Debian's "
                                                   "fortunes package (scripts/install-deps.sh"));
  write(folder, "only_index/art.dat", "x");
  std::filesystem::create_symlink(folder.file("art"), folder.file("only_index/art"));
  CHECK_THROWS_WITH(read_fortunes(folder.file("only_index")), Contains("holds no fortune files"));
}

TEST_CASE(
    "read_pairs reads d2l's fra.txt, counting the lines without a tab", "[data][text_corpus]") {
  TempFolder folder;
  const std::string path = write(folder, "fra.txt",
      "Go.\tVa !\tCC-BY 2.0 (France) Attribution: tatoeba.org\r\n"
      "no tab here\n"
      "\n"
      "Hi.\tSalut !\n"
      "\tempty source\n");
  const PairsFile file = read_pairs(path);
  REQUIRE(file.pairs.size() == 3);
  CHECK(file.pairs[0].source == "Go.");
  CHECK(file.pairs[0].target == "Va !");
  CHECK(file.pairs[1].source == "Hi.");
  CHECK(file.pairs[1].target == "Salut !");
  CHECK(file.pairs[2].source.empty());  // as d2l's line.split('\t') keeps it
  CHECK(file.skipped_lines == 2);
  CHECK(file.path == path);

  const std::string no_tab = write(folder, "no_tab.txt", "a b\nc d\n");
  CHECK_THROWS_WITH(read_pairs(no_tab),
      "read_pairs: " + no_tab +
          " has no usable line: none of its 2 lines holds a tab (\"source<TAB>target\", as d2l's "
          "fra.txt)");
  const std::string bad = write(folder, "bad.txt", "a\tb\nc\td\xFF\n");
  CHECK_THROWS_WITH(read_pairs(bad),
      Contains(bad + ": invalid UTF-8 at byte 7 (line 2): a byte that never occurs in UTF-8 FF"));
  CHECK_THROWS_WITH(read_pairs(write(folder, "empty.txt", "")), Contains("is an empty file"));
  CHECK_THROWS_WITH(
      read_pairs(write(folder, "bin.txt", std::string("a\tb\0", 4))), Contains("a NUL byte"));
  CHECK_THROWS_WITH(read_pairs(folder.file("missing")), Contains("missing does not exist"));
  CHECK_THROWS_AS(read_pairs(folder.file("missing")), IoError);
  CHECK(parse_pairs("x\ty", "<text>").pairs.size() == 1);  // no final newline
}

TEST_CASE(
    "sample_lm_batch draws nanoGPT's windows from a seeded generator", "[data][text_corpus]") {
  std::vector<int64_t> ids(50);
  for (int64_t i = 0; i < 50; ++i) ids[static_cast<std::size_t>(i)] = 100 + i;
  Generator generator(7);
  const LMBatch batch = sample_lm_batch(ids, 4, 8, generator);
  CHECK(batch.inputs.shape() == Shape{4, 8});
  CHECK(batch.labels.shape() == Shape{4, 8});
  CHECK(batch.inputs.dtype() == float32);
  // The windows are consecutive ids, labels one step ahead, from the starts randint draws.
  Generator replay(7);
  for (int64_t b = 0; b < 4; ++b) {
    const int64_t start = replay.randint(0, 50 - 8);
    for (int64_t t = 0; t < 8; ++t) {
      CHECK(row(batch.inputs, b)[t] == 100 + start + t);
      CHECK(row(batch.labels, b)[t] == 100 + start + t + 1);
    }
  }
  CHECK(generator.state() == replay.state());  // the state is the position in the stream
  // The same seed gives the same batch; the next batch differs.
  Generator again(7);
  CHECK(values(sample_lm_batch(ids, 4, 8, again).inputs) == values(batch.inputs));
  CHECK(values(sample_lm_batch(ids, 4, 8, again).inputs) != values(batch.inputs));
  // The shortest corpus: block_size + 1 ids, one window.
  Generator g(0);
  CHECK(row(sample_lm_batch({1, 2, 3}, 1, 2, g).labels, 0) == std::vector<int64_t>{2, 3});
  CHECK_THROWS_WITH(sample_lm_batch({1, 2}, 1, 2, g),
      Contains("sample_lm_batch: 2 ids are too few for a window of block_size + 1 = 3"));
  CHECK_THROWS_WITH(sample_lm_batch(ids, 0, 2, g), Contains("must be >= 1, got 0 and 2"));
  CHECK_THROWS_WITH(sample_lm_batch({1, -1}, 1, 1, g), Contains("id -1 at position 1"));
}

TEST_CASE("make_translation_batch is d2l's build_array_nmt with <bos> teacher forcing",
    "[data][text_corpus]") {
  const std::vector<std::string> reserved = {"<pad>", "<bos>", "<eos>"};
  // Source ids: <unk> 0, <pad> 1, <bos> 2, <eos> 3, go 4, . 5; target adds va 4, ! 5.
  const Vocab source_vocab(std::vector<std::string>{"go", "go", "."}, 0, reserved);
  const Vocab target_vocab(std::vector<std::string>{"va", "va", "!"}, 0, reserved);
  const Batch batch = make_translation_batch({{"go", "."}, {"go", "go", "go", "go", "what"}},
      {{"va", "!"}, {"?"}}, source_vocab, target_vocab, 4);
  CHECK(batch.size() == 2);
  CHECK(row(batch.source, 0) == std::vector<int64_t>{4, 5, 3, 1});  // go . <eos> <pad>
  CHECK(row(batch.source, 1) == std::vector<int64_t>{4, 4, 4, 4});  // truncated: <eos> lost
  CHECK(values(batch.source_valid_lens) == std::vector<int64_t>{3, 4});
  CHECK(row(batch.labels, 0) == std::vector<int64_t>{4, 5, 3, 1});         // va ! <eos> <pad>
  CHECK(row(batch.labels, 1) == std::vector<int64_t>{0, 3, 1, 1});         // <unk> <eos>
  CHECK(row(batch.decoder_input, 0) == std::vector<int64_t>{2, 4, 5, 3});  // <bos> va ! <eos>
  CHECK(row(batch.decoder_input, 1) == std::vector<int64_t>{2, 0, 3, 1});
  CHECK(values(batch.label_valid_lens) == std::vector<int64_t>{3, 2});

  CHECK_THROWS_WITH(make_translation_batch({{"go"}}, {}, source_vocab, target_vocab, 4),
      Contains("make_translation_batch: 1 sources but 0 targets"));
  CHECK_THROWS_WITH(make_translation_batch({{"go"}}, {{"va"}}, source_vocab, target_vocab, 0),
      Contains("num_steps must be >= 1, got 0"));
  const Vocab no_bos(std::vector<std::string>{"va"}, 0, {"<pad>", "<eos>"});
  CHECK_THROWS_WITH(make_translation_batch({{"go"}}, {{"va"}}, source_vocab, no_bos, 4),
      Contains("the target vocabulary has no <bos>"));
}

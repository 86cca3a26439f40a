// ag-train --task lm and ag-generate as a user runs them, in separate processes, on a tiny text
// that the test writes and a tiny model trained on it into a temporary directory: the evaluation
// lines, resuming bit for bit, generation with and without the cache, and the bad inputs of both.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "programs.h"
#include "tests/pictures_test_util.h"

using ag::viz::testing::read_text;
using ag::viz::testing::run;
using Catch::Matchers::Contains;
using Catch::Matchers::Matches;

namespace {

// A tiny model (1 block of width 16, block 16) of 30 steps on a text of a few sentences.
const std::string tiny_options =
    " --task lm --steps 30 --eval-every 30 --num-hiddens 16 --ffn-num-hiddens 32 --heads 2 "
    "--layers 1 --batch-size 8 --eval-windows 4 --sample-length 20 --lr 0.01";
const std::string tiny_model = tiny_options + " --block-size 16";

// What ag-generate printed on stdout: its output without the last line (the speed, on stderr).
std::string generated_text(const std::string& output) {
  const std::size_t speed = output.rfind("ag-generate: ");
  return output.substr(0, speed);
}

struct TrainedLM {
  std::filesystem::path dir = ag::viz::testing::temp_dir();
  std::string text = (dir / "text.txt").string();
  std::string model = (dir / "lm.agm").string();
  std::string safetensors = (dir / "lm.safetensors").string();
  std::string training_output;
  TrainedLM() {
    std::ofstream out(text);
    for (int i = 0; i < 12; ++i)
      out << "the cat sat on the mat. the dog ate the hat.\nwhat a cat, what a dog!\n";
    out.close();
    auto trained = run(train + tiny_model + " --text " + text + " --save-model " + model);
    INFO(trained.output);
    REQUIRE(trained.exit_code == 0);
    training_output = trained.output;
  }
  ~TrainedLM() { std::filesystem::remove_all(dir); }
};

const TrainedLM& trained() {
  static const TrainedLM lm;
  return lm;
}

}  // namespace

TEST_CASE("ag-train --task lm prints the validation numbers and a sample at each evaluation",
    "[examples][lm]") {
  const std::string& output = trained().training_output;
  INFO(output);
  CHECK_THAT(output, Contains("ag-train: task lm, --text (1 file, 828 characters), char tokens"));
  CHECK_THAT(output,
      Matches("(.|\n)*eval @ step 30: train loss [0-9.]+  validation loss [0-9.]+  perplexity "
              "[0-9.]+  bits/char [0-9.]+  \\(4 windows, 64 tokens\\)\n  sample \\(temperature "
              "0.8, seed 0\\):\n  \\| (.|\n)*done: 30 steps in [0-9:]+; validation loss(.|\n)*"));
  // The word tokenizer on the same text.
  const std::string word_model = (trained().dir / "words.safetensors").string();
  const auto words = run(train + tiny_options + " --block-size 4 --tokenizer word --text " +
                         trained().text + " --save-model " + word_model);
  INFO(words.output);
  CHECK(words.exit_code == 0);
  CHECK_THAT(words.output, Contains("word tokens: vocabulary 15"));
  // ag-generate tokenizes the prompt as the training text was: lower case, words.
  const auto generated =
      run(generate + " --model " + word_model + " --prompt 'The CAT' --max-new 5 --temperature 0");
  INFO(generated.output);
  CHECK(generated.exit_code == 0);
  CHECK_THAT(generated.output, Matches("the cat[ \n](.|\n)*ag-generate: 5 tokens(.|\n)*"));
}

TEST_CASE("ag-train --task lm resumes bit for bit", "[examples][lm]") {
  const std::filesystem::path dir = ag::viz::testing::temp_dir();
  const std::string common = train + tiny_model + " --text " + trained().text;
  const std::string whole = (dir / "whole.csv").string(), parts = (dir / "parts.csv").string();
  const std::string checkpoint = (dir / "run.agc").string();
  REQUIRE(run(common + " --loss-log " + whole).exit_code == 0);
  const auto first =
      run(common + " --loss-log " + parts + " --checkpoint " + checkpoint + " --stop-after 12");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  // --resume alone: the checkpoint says it is a --task lm run.
  const auto second = run(train + " --resume " + checkpoint + " --loss-log " + parts);
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK_THAT(second.output, Contains("resuming " + checkpoint + " at step 13 of 30"));
  CHECK(read_text(parts) == read_text(whole));
  // A run whose text has changed since is refused.
  const std::string copy = (dir / "copy.txt").string(), other = (dir / "other.agc").string();
  std::filesystem::copy_file(trained().text, copy);
  REQUIRE(run(train + tiny_model + " --text " + copy + " --checkpoint " + other + " --stop-after 5")
              .exit_code == 0);
  std::ofstream(copy, std::ios::app) << "one more line\n";
  const auto changed = run(train + " --resume " + other);
  CHECK(changed.exit_code == 1);
  CHECK_THAT(changed.output, Contains("the text it was trained on has changed since"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("ag-generate continues a prompt, with the cache as without it", "[examples][lm]") {
  const std::string greedy = " --prompt 'the c' --max-new 30 --temperature 0";
  const auto cached = run(generate + " --model " + trained().model + greedy);
  INFO(cached.output);
  REQUIRE(cached.exit_code == 0);
  const std::string text = generated_text(cached.output);
  CHECK(text.rfind("the c", 0) == 0);
  CHECK(text.size() == 5 + 30 + 1);  // the prompt, 30 characters, a line break
  CHECK(generated_text(
            run(generate + " --model " + trained().model + greedy + " --no-cache").output) == text);
  // The safetensors file holds the same model (trained with the same seed).
  REQUIRE(run(train + tiny_model + " --text " + trained().text + " --save-model " +
              trained().safetensors)
              .exit_code == 0);
  CHECK(
      generated_text(run(generate + " --model " + trained().safetensors + greedy).output) == text);
  const std::string sampled = " --prompt 'what' --max-new 40 --temperature 1 --top-k 5 --seed 3";
  const auto a = run(generate + " --model " + trained().model + sampled);
  INFO(a.output);
  CHECK(a.exit_code == 0);
  CHECK_THAT(a.output, Matches("what(.|\n)*ag-generate: 40 tokens in [0-9.]+ s \\([0-9.]+ "
                               "tokens/s, key/value cache\\)\n"));
  CHECK(generated_text(
            run(generate + " --model " + trained().model + sampled + " --no-cache").output) ==
        generated_text(a.output));
  // Characters the training text lacks become <unk>, with a warning.
  const auto unknown =
      run(generate + " --model " + trained().model + " --prompt 'Zé t' --max-new 3");
  CHECK(unknown.exit_code == 0);
  CHECK_THAT(unknown.output, Contains("ag-generate: warning: 2 prompt tokens are not in the "
                                      "model's vocabulary and become <unk>: 'Z', 'é'"));
}

namespace {
// `command` fails with exit code `code` and says `message`.
void refused(const std::string& command, int code, const std::string& message) {
  const auto result = run(command);
  INFO(command << "\n" << result.output);
  CHECK(result.exit_code == code);
  CHECK_THAT(result.output, Contains(message));
}
}  // namespace

TEST_CASE(
    "ag-generate refuses bad options and files that are not language models", "[examples][lm]") {
  const std::string model = " --model " + trained().model;
  refused(generate + model + " --prompt ''", 2, "ag-generate: --prompt is empty");
  refused(generate + model + " --prompt a --max-new -1", 2, "--max-new -1 is outside 0-1000000");
  refused(generate + model + " --prompt a --max-new 1000001", 2, "--max-new 1000001 is outside");
  refused(generate + model + " --prompt a --temperature -1", 2, "--temperature -1.000000 must be");
  refused(generate + model + " --prompt a --temperature nan", 2, "must be a number >= 0");
  refused(generate + model + " --prompt a --top-k -1", 2, "--top-k -1 is negative");
  refused(generate + model + " --prompt a --top-k 1000", 2, "--top-k 1000 is above the vocabulary");
  refused(generate + " --model " + trained().text + " --prompt a", 1, "ag-generate: ");
  refused(generate + " --model " + trained().dir.string() + "/missing.agm --prompt a", 1,
      "missing.agm");
  // A seq2seq model file is not a language model.
  const std::string reverse = trained().dir.string() + "/reverse.agm";
  REQUIRE(run(train +
              " --task reverse --steps 2 --eval-every 2 --eval-size 4 --num-hiddens 8 "
              "--ffn-num-hiddens 8 --save-model " +
              reverse)
              .exit_code == 0);
  refused(generate + " --model " + reverse + " --prompt a", 1,
      "holds a model of task 'reverse', not a language model");
  // … and ag-predict names the program for a language model.
  refused(std::string(AG_PREDICT_PATH) + " " + trained().model + " 'a b'", 1,
      "holds a language model (ag-train --task lm): ag-generate runs it");
  refused(generate + model + " --prompt a --max-memory 1K", 1, "allowed (--max-memory)");
}

TEST_CASE("ag-generate reads its whole numbers as written, as ag-train does", "[examples][lm]") {
  // CLI11 alone read 010 as 8 and 0x10 as 16, took +5, and wrapped --seed -1 to 2^64 - 1.
  const std::string with_prompt = generate + " --model " + trained().model + " --prompt a ";
  for (const std::string option : {"--max-new", "--top-k", "--seed", "--threads"})
    for (const std::string value : {"010", "0x10", "+5"})
      refused(with_prompt + option + " " + value, 2,
          "ag-generate: " + option + ": " + value + " is not a whole number (see --help)\n");
  refused(with_prompt + "--seed -1", 2,
      "ag-generate: --seed: -1 is out of range (0 to 18446744073709551615) (see --help)\n");
  refused(with_prompt + "--seed 18446744073709551616", 2,
      "ag-generate: --seed: 18446744073709551616 is out of range");
  // The signed options take -1, and their bounds refuse it (--max-new and --top-k: above).
  refused(with_prompt + "--threads -1", 2, "ag-generate: --threads -1 is outside 1-");
}

TEST_CASE("ag-train --task lm refuses bad texts and options", "[examples][lm]") {
  // A text shorter than block_size + 1 tokens in its validation split.
  const std::string short_text = trained().dir.string() + "/short.txt";
  std::ofstream(short_text) << "a short text, far below 17 tokens of validation\n";
  refused(train + tiny_model + " --text " + short_text, 2,
      "ag-train: the text is too short: its validation split has 5 char tokens, and --block-size "
      "16 needs at least 17");
  refused(train + tiny_model + " --text " + trained().dir.string() + "/none.txt", 2, "none.txt");
  refused(train + " --task reverse --text " + short_text, 2, "for --task lm only");
  refused(train + tiny_model + " --tokenizer bpe", 2, "unknown --tokenizer 'bpe'");
  refused(train + tiny_model + " --text " + trained().text + " --max-memory 64K", 2,
      "ag-train: this run (--num-hiddens 16, --layers 1, --block-size 16, --batch-size 8, "
      "vocabulary 18, --sample-length 20) needs about");
}

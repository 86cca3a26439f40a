// The toy tasks of ag-train and their batches: the vocabulary, the tasks' targets, d2l's reverse
// setting, make_batch's layout, and the held-out set that training never sees.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>

#include "data/batch.h"
#include "data/toy_tasks.h"

using namespace ag;
using namespace ag::data;
using Catch::Matchers::Contains;

namespace {

std::vector<int64_t> ids(const Tensor& t, int64_t row) {
  std::vector<int64_t> out;
  for (float v : t.select(0, row).to_vector<float>()) out.push_back(static_cast<int64_t>(v));
  return out;
}

}  // namespace

TEST_CASE("TaskVocab turns tokens into text and back", "[data]") {
  TaskVocab vocab({"a", "b", "+"});
  CHECK(vocab.size() == 6);
  CHECK(vocab.token(TaskVocab::pad) == "<pad>");
  CHECK(vocab.token(TaskVocab::bos) == "<bos>");
  CHECK(vocab.token(TaskVocab::eos) == "<eos>");
  CHECK(vocab.to_text({3, 5, 4}) == "a + b");
  CHECK(vocab.from_text("a + b") == std::vector<int64_t>{3, 5, 4});
  CHECK_THROWS_WITH(vocab.from_text("a c"), Contains("unknown token 'c'"));
  CHECK_THROWS_AS(vocab.token(6), ValueError);
  CHECK_THROWS_AS(TaskVocab({"a", "a"}), ValueError);
  CHECK(vocab.content_tokens() == std::vector<std::string>{"a", "b", "+"});
}

TEST_CASE("a task reads a user's source and refuses what it cannot hold", "[data]") {
  auto reverse = make_task("reverse");  // tokens 3–19, at most 9 of them
  CHECK(reverse->max_source_len() == 9);
  CHECK(reverse->source_from_text(" 3  19 4 ") == std::vector<int64_t>{3, 19, 4});
  CHECK(reverse->source_from_text("3 4 5 6 7 8 9 10 11").size() == 9);  // the longest
  const std::string tokens_are =
      "; the reverse task's tokens are 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19";
  CHECK_THROWS_WITH(reverse->source_from_text("3 20 4"),
      Contains("unknown token '20' in \"3 20 4\"" + tokens_are));
  for (const std::string special : {"<pad>", "<bos>", "<eos>"})
    CHECK_THROWS_WITH(reverse->source_from_text("3 " + special),
        Contains("'" + special + "' in \"3 " + special + "\" is a special token") &&
            Contains(tokens_are));
  CHECK_THROWS_WITH(reverse->source_from_text("3 4 5 6 7 8 9 10 11 12"),
      Contains("\"3 4 5 6 7 8 9 10 11 12\" has 10 tokens, but the reverse task's sources have "
               "at most 9"));
  CHECK_THROWS_WITH(reverse->source_from_text("  "), Contains("\"  \" has no tokens"));
  CHECK_THROWS_AS(reverse->source_from_text("3 20"), ValueError);

  auto add = make_task("add");
  CHECK(add->source_from_text("1 2 + 9 5").size() == 5);
  CHECK_THROWS_WITH(add->source_from_text("12 + 95"),
      Contains(
          "unknown token '12' in \"12 + 95\"; the add task's tokens are 0 1 2 3 4 5 6 7 8 9 +"));
}

TEST_CASE("the tasks make the right targets from seeded sources", "[data]") {
  Generator g(1);
  for (const std::string& name : task_names()) {
    auto task = make_task(name);
    CHECK(task->name() == name);
    for (int i = 0; i < 200; ++i) {
      Example e = task->sample(g);
      REQUIRE(!e.source.empty());
      CHECK(static_cast<int64_t>(e.source.size()) < task->source_steps());
      CHECK(static_cast<int64_t>(e.target.size()) < task->target_steps());
      for (int64_t id : e.source) CHECK((id >= 3 && id < task->vocab().size()));
      std::vector<int64_t> expected = e.source;
      if (name == "reverse") std::reverse(expected.begin(), expected.end());
      if (name == "sort") std::sort(expected.begin(), expected.end());
      if (name == "add") {
        // "1 2 + 9 5" -> "1 0 7"
        std::string text = task->vocab().to_text(e.source);
        text.erase(std::remove(text.begin(), text.end(), ' '), text.end());
        const std::size_t plus = text.find('+');
        const int sum = std::stoi(text.substr(0, plus)) + std::stoi(text.substr(plus + 1));
        std::string digits;
        for (char c : std::to_string(sum)) digits += std::string(digits.empty() ? "" : " ") + c;
        expected = task->vocab().from_text(digits);
      }
      CHECK(e.target == expected);
    }
  }
  CHECK_THROWS_WITH(make_task("rot13"), Contains("unknown task 'rot13'") && Contains("reverse"));
}

TEST_CASE("the reverse task is d2l's setting: vocabulary 20, lengths 1-9, 10 steps", "[data]") {
  auto task = make_task("reverse");
  CHECK(task->vocab().size() == 20);
  CHECK(task->source_steps() == 10);
  CHECK(task->target_steps() == 10);
  Generator g(2);
  std::vector<int> length_counts(10, 0);
  for (int i = 0; i < 9000; ++i) ++length_counts[task->sample(g).source.size()];
  CHECK(length_counts[0] == 0);
  for (int length = 1; length <= 9; ++length)
    CHECK(length_counts[length] == Approx(1000).margin(150));
}

TEST_CASE("make_batch lays out sources, decoder inputs and labels with padding", "[data]") {
  std::vector<Example> examples = {{{5, 6, 7}, {7, 6, 5}}, {{9}, {9}}};
  Batch batch = make_batch(examples, 5, 5);
  CHECK(batch.source.shape() == Shape{2, 5});
  CHECK(ids(batch.source, 0) == std::vector<int64_t>{5, 6, 7, TaskVocab::eos, TaskVocab::pad});
  CHECK(ids(batch.source, 1) ==
        std::vector<int64_t>{9, TaskVocab::eos, TaskVocab::pad, TaskVocab::pad, TaskVocab::pad});
  CHECK(
      ids(batch.decoder_input, 0) == std::vector<int64_t>{TaskVocab::bos, 7, 6, 5, TaskVocab::pad});
  CHECK(ids(batch.labels, 0) == std::vector<int64_t>{7, 6, 5, TaskVocab::eos, TaskVocab::pad});
  CHECK(batch.source_valid_lens.to_vector<double>() == std::vector<double>{4, 2});
  CHECK(batch.label_valid_lens.to_vector<double>() == std::vector<double>{4, 2});
  CHECK_THROWS_WITH(make_batch(examples, 3, 5), Contains("make_batch") && Contains("does not fit"));
}

TEST_CASE("the held-out set is fixed, distinct, and never trained on", "[data]") {
  auto task = make_task("reverse");
  std::vector<Example> held_out = held_out_set(*task, 500);
  CHECK(held_out.size() == 500);
  std::set<std::vector<int64_t>> sources;
  for (const Example& e : held_out) sources.insert(e.source);
  CHECK(sources.size() == 500);
  CHECK(held_out_set(*task, 500)[123].source == held_out[123].source);
  TrainingStream stream(*task, held_out, 7);
  for (int i = 0; i < 100; ++i)
    for (const Example& e : stream.next(64)) CHECK_FALSE(sources.count(e.source));
}

TEST_CASE("a held-out set takes at most half of its task's distinct sources", "[data]") {
  // add: a and b each one of 0–999. copy, reverse, sort: 1–9 of 17 tokens, Σ 17^L.
  uint64_t sequences = 0, power = 1;
  for (int length = 1; length <= 9; ++length) sequences += power *= 17;
  CHECK(sequences == 125999618777ull);
  for (const std::string& name : task_names()) {
    auto task = make_task(name);
    const uint64_t expected = name == "add" ? 1000000 : sequences;
    CHECK(task->distinct_sources() == expected);
    CHECK(max_held_out(*task) == static_cast<int64_t>(expected / 2));
  }
  // One more than half is refused at once (it used to draw for ever: 1000 attempts per example).
  auto add = make_task("add");
  CHECK_THROWS_AS(held_out_set(*add, 500001), ValueError);
  CHECK_THROWS_WITH(held_out_set(*add, 1000001),
      Contains("held_out_set: 1000001 held-out examples for task 'add', which has 1000000 distinct "
               "sources: the held-out set takes 0 to 500000 of them"));
  CHECK_THROWS_WITH(held_out_set(*add, -1), Contains("held_out_set: -1 held-out examples"));
  CHECK(held_out_set(*add, 0).empty());
}

TEST_CASE(
    "batch_rows takes rows of every tensor of a batch — random_batch is full length", "[data]") {
  Generator generator(3);
  const Batch batch = random_batch(5, 4, 3, 10, generator);
  CHECK(batch.size() == 5);
  CHECK(batch.source.shape() == Shape{5, 4});
  CHECK(batch.labels.shape() == Shape{5, 3});
  for (float id : batch.source.to_vector<float>()) CHECK((id >= 3 && id < 10));
  CHECK(batch.source_valid_lens.to_vector<float>() == std::vector<float>(5, 4.0f));
  CHECK(batch.label_valid_lens.to_vector<float>() == std::vector<float>(5, 3.0f));
  // The decoder reads <bos>, then the labels shifted right by one.
  const auto decoder_input = batch.decoder_input.to_vector<float>();
  const auto labels = batch.labels.to_vector<float>();
  for (int64_t b = 0; b < 5; ++b) {
    CHECK(decoder_input[b * 3] == float(TaskVocab::bos));
    CHECK(decoder_input[b * 3 + 1] == labels[b * 3]);
    CHECK(decoder_input[b * 3 + 2] == labels[b * 3 + 1]);
  }

  const Batch middle = batch_rows(batch, 1, 3);
  CHECK(middle.size() == 2);
  CHECK(middle.labels.to_vector<float>() ==
        std::vector<float>(labels.begin() + 3, labels.begin() + 9));
  CHECK(middle.label_valid_lens.to_vector<float>() == std::vector<float>(2, 3.0f));
  CHECK(batch_rows(batch, 5, 5).size() == 0);
  CHECK_THROWS_MATCHES(batch_rows(batch, 3, 6), ValueError,
      Catch::Matchers::Predicate<std::exception>(
          [](const std::exception& e) {
            return std::string(e.what()) == "batch_rows: rows [3, 6) of a batch of 5 rows";
          },
          "names the rows and the batch size"));
  CHECK_THROWS_AS(random_batch(5, 4, 3, 3, generator), ValueError);
}

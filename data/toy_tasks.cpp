#include "data/toy_tasks.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "autograd/error.h"

namespace ag::data {

// ---- vocabulary ---------------------------------------------------------------------------------

TaskVocab::TaskVocab(const std::vector<std::string>& content_tokens)
    : tokens_{"<pad>", "<bos>", "<eos>"} {
  for (const std::string& t : content_tokens) {
    if (t.empty() || t.find(' ') != std::string::npos ||
        std::count(tokens_.begin(), tokens_.end(), t))
      fail<ValueError>("Vocab: token '", t, "' is empty, has a space or is repeated");
    tokens_.push_back(t);
  }
}

std::vector<std::string> TaskVocab::content_tokens() const {
  return {tokens_.begin() + eos + 1, tokens_.end()};
}

const std::string& TaskVocab::token(int64_t id) const {
  if (id < 0 || id >= size()) fail<ValueError>("Vocab: id ", id, " is outside [0, ", size(), ")");
  return tokens_[static_cast<std::size_t>(id)];
}

int64_t TaskVocab::id(const std::string& token) const {
  auto it = std::find(tokens_.begin(), tokens_.end(), token);
  if (it == tokens_.end()) fail<ValueError>("Vocab: unknown token '", token, "'");
  return it - tokens_.begin();
}

std::string TaskVocab::to_text(const std::vector<int64_t>& ids) const {
  std::string text;
  for (std::size_t i = 0; i < ids.size(); ++i) text += (i ? " " : "") + token(ids[i]);
  return text;
}

std::vector<int64_t> TaskVocab::from_text(const std::string& text) const {
  std::istringstream words(text);
  std::vector<int64_t> ids;
  for (std::string word; words >> word;) ids.push_back(id(word));
  return ids;
}

// ---- tasks --------------------------------------------------------------------------------------

namespace {

std::vector<std::string> number_tokens(int first, int last) {
  std::vector<std::string> tokens;
  for (int i = first; i <= last; ++i) tokens.push_back(std::to_string(i));
  return tokens;
}

// copy, reverse and sort share the sampling: length uniform in 1–9, tokens 3–19 uniform.
class SequenceTask : public Task {
 public:
  enum class Kind { copy, reverse, sort };
  explicit SequenceTask(Kind kind) : Task(TaskVocab(number_tokens(3, 19)), 9, 9), kind_(kind) {}
  std::string name() const override {
    return kind_ == Kind::copy ? "copy" : kind_ == Kind::reverse ? "reverse" : "sort";
  }
  // Σ_{L=1..9} 17^L = 125 999 618 777 sequences of 1–9 of the 17 content tokens.
  uint64_t distinct_sources() const override {
    const uint64_t tokens = static_cast<uint64_t>(vocab_.size() - TaskVocab::eos - 1);
    uint64_t total = 0, of_length = 1;
    for (int64_t length = 1; length <= max_source_len_; ++length) {
      if (of_length > UINT64_MAX / tokens) return UINT64_MAX;
      of_length *= tokens;
      if (total > UINT64_MAX - of_length) return UINT64_MAX;
      total += of_length;
    }
    return total;
  }
  Example sample(Generator& generator) const override {
    const int64_t length = generator.randint(1, max_source_len_ + 1);
    Example e;
    for (int64_t i = 0; i < length; ++i) e.source.push_back(generator.randint(3, vocab_.size()));
    e.target = e.source;
    if (kind_ == Kind::reverse) std::reverse(e.target.begin(), e.target.end());
    // Sorting the ids sorts the tokens by value: id − 3 + 3 = the number written on the token.
    if (kind_ == Kind::sort) std::sort(e.target.begin(), e.target.end());
    return e;
  }

 private:
  Kind kind_;
};

// a + b for a, b of 1–3 digits, written digit by digit: "1 2 + 9 5" -> "1 0 7".
class AdditionTask : public Task {
 public:
  AdditionTask()
      : Task(TaskVocab([] {
          auto t = number_tokens(0, 9);
          t.push_back("+");
          return t;
        }()),
            7, 4) {}
  std::string name() const override { return "add"; }
  // a and b each one of the 1000 numbers 0–999: 10^6 sources "a + b".
  uint64_t distinct_sources() const override { return 1000 * 1000; }
  Example sample(Generator& generator) const override {
    // A number of 1, 2 or 3 digits (each as likely), uniform among the numbers of that length.
    auto number = [&] {
      constexpr int64_t low[] = {0, 10, 100}, high[] = {10, 100, 1000};
      const int64_t digits = generator.randint(1, 4);
      return generator.randint(low[digits - 1], high[digits - 1]);
    };
    const int64_t a = number(), b = number();
    Example e;
    auto append_digits = [&](std::vector<int64_t>& out, int64_t value) {
      for (char c : std::to_string(value)) out.push_back(vocab_.id(std::string(1, c)));
    };
    append_digits(e.source, a);
    e.source.push_back(vocab_.id("+"));
    append_digits(e.source, b);
    append_digits(e.target, a + b);
    return e;
  }
};

}  // namespace

std::vector<std::string> task_names() { return {"copy", "reverse", "sort", "add"}; }

std::unique_ptr<Task> make_task(const std::string& name) {
  if (name == "copy") return std::make_unique<SequenceTask>(SequenceTask::Kind::copy);
  if (name == "reverse") return std::make_unique<SequenceTask>(SequenceTask::Kind::reverse);
  if (name == "sort") return std::make_unique<SequenceTask>(SequenceTask::Kind::sort);
  if (name == "add") return std::make_unique<AdditionTask>();
  fail<ValueError>("unknown task '", name, "' (known: copy, reverse, sort, add)");
}

std::vector<int64_t> Task::source_from_text(const std::string& text) const {
  const std::vector<std::string> content = vocab_.content_tokens();
  std::string known;  // "3 4 5 … 19": every content token, for the messages
  for (const std::string& t : content) known += (known.empty() ? "" : " ") + t;
  const std::string tokens_are = "; the " + name() + " task's tokens are " + known;
  std::istringstream words(text);
  std::vector<int64_t> ids;
  for (std::string word; words >> word;) {
    if (word == vocab_.token(TaskVocab::pad) || word == vocab_.token(TaskVocab::bos) ||
        word == vocab_.token(TaskVocab::eos))
      fail<ValueError>("'", word, "' in \"", text,
          "\" is a special token: the model adds <bos> and <eos> itself, and pads with <pad>",
          tokens_are);
    if (std::find(content.begin(), content.end(), word) == content.end())
      fail<ValueError>("unknown token '", word, "' in \"", text, "\"", tokens_are);
    ids.push_back(vocab_.id(word));
  }
  if (ids.empty()) fail<ValueError>("\"", text, "\" has no tokens", tokens_are);
  if (static_cast<int64_t>(ids.size()) > max_source_len_)
    fail<ValueError>("\"", text, "\" has ", ids.size(), " tokens, but the ", name(),
        " task's sources have at most ", max_source_len_);
  return ids;
}

// ---- held-out set and training stream -----------------------------------------------------------

int64_t max_held_out(const Task& task) {
  return static_cast<int64_t>(std::min<uint64_t>(task.distinct_sources() / 2, INT64_MAX));
}

std::vector<Example> held_out_set(const Task& task, int64_t count, uint64_t seed) {
  if (count < 0 || count > max_held_out(task))
    fail<ValueError>("held_out_set: ", count, " held-out examples for task '", task.name(),
        "', which has ", task.distinct_sources(), " distinct sources: the held-out set takes 0 to ",
        max_held_out(task), " of them (at most half, so that training has sources left)");
  Generator generator(seed);
  std::set<std::vector<int64_t>> seen;
  std::vector<Example> examples;
  for (int64_t attempts = 0; static_cast<int64_t>(examples.size()) < count; ++attempts) {
    if (attempts > 1000 * count)
      fail<ValueError>(
          "held_out_set: task '", task.name(), "' has fewer than ", count, " distinct examples");
    Example e = task.sample(generator);
    if (seen.insert(e.source).second) examples.push_back(std::move(e));
  }
  return examples;
}

TrainingStream::TrainingStream(
    const Task& task, const std::vector<Example>& held_out, uint64_t seed)
    : task_(task), generator_(seed) {
  for (const Example& e : held_out) held_out_sources_.insert(e.source);
}

std::vector<Example> TrainingStream::next(int64_t batch_size) {
  std::vector<Example> batch;
  while (static_cast<int64_t>(batch.size()) < batch_size) {
    Example e = task_.sample(generator_);
    if (!held_out_sources_.count(e.source)) batch.push_back(std::move(e));
  }
  return batch;
}

}  // namespace ag::data

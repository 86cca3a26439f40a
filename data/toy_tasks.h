// The toy sequence-to-sequence tasks of ag-train — copy, reverse, sort and addition — with their
// fixed vocabularies, a held-out set, and the seeded stream of training examples.
//
// Every sequence is generated in-process from a seeded ag::Generator; nothing is downloaded.
// A task gives pairs of content sequences; data/batch.h turns them into the model's tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "autograd/generator.h"

namespace ag::data {

// A toy task's fixed vocabulary (not d2l's Vocab for text, which counts tokens in a corpus).
// Token ids: 0 <pad>, 1 <bos>, 2 <eos>, then the task's content tokens in order.
class TaskVocab {
 public:
  static constexpr int64_t pad = 0, bos = 1, eos = 2;
  explicit TaskVocab(const std::vector<std::string>& content_tokens);
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  // The tokens a sequence may hold, in id order: every token but <pad>, <bos> and <eos>.
  std::vector<std::string> content_tokens() const;
  const std::string& token(int64_t id) const;
  int64_t id(const std::string& token) const;  // throws ValueError for an unknown token
  // Space-separated tokens ("3 9 4 7"), and back.
  std::string to_text(const std::vector<int64_t>& ids) const;
  std::vector<int64_t> from_text(const std::string& text) const;

 private:
  std::vector<std::string> tokens_;
};

// One pair of content sequences (no <bos>, <eos> or padding).
struct Example {
  std::vector<int64_t> source;
  std::vector<int64_t> target;
  bool operator<(const Example& other) const { return source < other.source; }
};

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  virtual Example sample(Generator& generator) const = 0;
  const TaskVocab& vocab() const { return vocab_; }
  // Time steps of a batch: the longest content plus <eos>.
  int64_t source_steps() const { return max_source_len_ + 1; }
  int64_t target_steps() const { return max_target_len_ + 1; }
  int64_t max_source_len() const { return max_source_len_; }
  // How many different sources sample() can draw (saturating at UINT64_MAX): the ceiling of a
  // held-out set, whose sources are distinct.
  virtual uint64_t distinct_sources() const = 0;
  // A source typed by a user ("3 9 4 7"): its content-token ids. Throws ValueError, naming the
  // text and the task's tokens, for an unknown token, for <pad>, <bos> or <eos> (the model adds
  // those itself), for no tokens, and for more than max_source_len() tokens.
  std::vector<int64_t> source_from_text(const std::string& text) const;

 protected:
  Task(TaskVocab vocab, int64_t max_source_len, int64_t max_target_len)
      : vocab_(std::move(vocab)),
        max_source_len_(max_source_len),
        max_target_len_(max_target_len) {}
  TaskVocab vocab_;
  int64_t max_source_len_, max_target_len_;
};

// The names make_task knows: "copy", "reverse", "sort", "add".
std::vector<std::string> task_names();
// copy / reverse / sort: content tokens 3–19 ("3" … "19", vocabulary 20) drawn uniformly, length
// uniform in 1–9, target the same sequence copied, reversed or sorted (d2l's toy setting).
// add: two numbers of 1–3 digits, "1 2 + 9 5" -> "1 0 7" (tokens "0"–"9" and "+").
// Throws ValueError naming the known tasks for any other name.
std::unique_ptr<Task> make_task(const std::string& name);

// The held-out set: `count` distinct examples drawn from their own seed, so it is the same for
// every training run and never changes with the training seed.
//
// It may take at most half of the task's distinct sources (max_held_out): the training stream
// skips every held-out source, so it needs sources left, and drawing the set stays quick — the
// last of all 10^6 sources of "add" would take some 10^8 draws (the three-digit pairs are the
// rarest), half of them a few million. Throws ValueError, naming the task and both numbers, for
// a larger or negative count.
int64_t max_held_out(const Task& task);
std::vector<Example> held_out_set(const Task& task, int64_t count, uint64_t seed = 0x5eed);

// Training examples from a seeded generator, skipping any source that is in the held-out set.
class TrainingStream {
 public:
  TrainingStream(const Task& task, const std::vector<Example>& held_out, uint64_t seed);
  std::vector<Example> next(int64_t batch_size);
  Generator& generator() { return generator_; }  // its state is the stream's position

 private:
  const Task& task_;
  std::set<std::vector<int64_t>> held_out_sources_;
  Generator generator_;
};

}  // namespace ag::data

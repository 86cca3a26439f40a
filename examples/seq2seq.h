// Toy sequence-to-sequence tasks and the pieces around them that ag-train, the benchmarks and the
// tests share: a vocabulary, the tasks (copy, reverse, sort, addition), batches with padding and
// valid lengths, the d2l Transformer with Xavier init, greedy decoding and evaluation.
//
// Every sequence is generated in-process from a seeded ag::Generator; nothing is downloaded.
//
// A source is its content tokens followed by <eos>, padded with <pad> to source_steps. The decoder
// reads <bos> followed by the target, and learns to predict the target followed by <eos>
// (teacher forcing), as in d2l's train_seq2seq.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "nn/nn.h"
#include "optim/optimizer.h"

namespace ag::seq2seq {

// Token ids: 0 <pad>, 1 <bos>, 2 <eos>, then the task's content tokens in order.
class Vocab {
 public:
  static constexpr int64_t pad = 0, bos = 1, eos = 2;
  explicit Vocab(const std::vector<std::string>& content_tokens);
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
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
  const Vocab& vocab() const { return vocab_; }
  // Time steps of a batch: the longest content plus <eos>.
  int64_t source_steps() const { return max_source_len_ + 1; }
  int64_t target_steps() const { return max_target_len_ + 1; }

 protected:
  Task(Vocab vocab, int64_t max_source_len, int64_t max_target_len)
      : vocab_(std::move(vocab)), max_source_len_(max_source_len), max_target_len_(max_target_len) {}
  Vocab vocab_;
  int64_t max_source_len_, max_target_len_;
};

// The names make_task knows: "copy", "reverse", "sort", "add".
std::vector<std::string> task_names();
// copy / reverse / sort: content tokens 3–19 ("3" … "19", vocabulary 20) drawn uniformly, length
// uniform in 1–9, target the same sequence copied, reversed or sorted (d2l's toy setting).
// add: two numbers of 1–3 digits, "1 2 + 9 5" -> "1 0 7" (tokens "0"–"9" and "+").
// Throws ValueError naming the known tasks for any other name.
std::unique_ptr<Task> make_task(const std::string& name);

// A batch as the model consumes it (all id tensors are float32 holding integers).
struct Batch {
  Tensor source;             // (B, Ts): content, <eos>, <pad>…
  Tensor source_valid_lens;  // (B,): content length + 1
  Tensor decoder_input;      // (B, Tt): <bos>, target, <pad>…
  Tensor labels;             // (B, Tt): target, <eos>, <pad>…
  Tensor label_valid_lens;   // (B,): target length + 1
  int64_t size() const { return source.size(0); }
};
Batch make_batch(const std::vector<Example>& examples, int64_t source_steps, int64_t target_steps);

// The held-out set: `count` distinct examples drawn from their own seed, so it is the same for
// every training run and never changes with the training seed.
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

struct ModelConfig {
  int64_t vocab_size = 20;
  int64_t num_hiddens = 32, ffn_num_hiddens = 64, num_heads = 4, num_layers = 2;
  double dropout = 0.1;
};
// The d2l Transformer (encoder and decoder of num_layers blocks each), with every Linear weight
// re-initialised by Xavier-uniform as d2l's train_seq2seq does. Uses the default generator.
std::shared_ptr<nn::EncoderDecoder> make_transformer(const ModelConfig& config);

// ---- checkpoints ------------------------------------------------------------------------------------
// The task and model configuration as checkpoint entries "config.task", "config.num_hiddens", …
void save_model_config(Checkpoint& checkpoint, const std::string& task, const ModelConfig& config);
ModelConfig load_model_config(const Checkpoint& checkpoint);

// A model-only file (kind "model"): the model's parameters and buffers under "model." and its
// configuration — for inference and for sharing.
void save_model(const std::string& path, const nn::EncoderDecoder& model, const std::string& task,
                const ModelConfig& config, CheckpointFormat format = CheckpointFormat::binary);

struct LoadedModel {
  std::unique_ptr<Task> task;
  ModelConfig config;
  std::shared_ptr<nn::EncoderDecoder> model;
};
// Builds the model a model file or an ag-train checkpoint describes and loads its weights
// (strictly: every name, shape and dtype must match).
LoadedModel load_model(const std::string& path);

// One training step with teacher forcing: forward, the masked cross-entropy per valid token,
// backward, clipping of the global gradient norm at `clip`, and the optimizer's update. Returns the
// loss before the update.
double train_step(nn::EncoderDecoder& model, optim::Optimizer& optimizer, const Batch& batch, double clip);

// Greedy decoding of a batch of sources, one token per step with the decoder's key/value cache,
// in eval mode without recording a graph. Each prediction stops before the first <eos> (or after
// max_steps tokens).
std::vector<std::vector<int64_t>> greedy_decode(nn::EncoderDecoder& model, const Tensor& source,
                                                const Tensor& source_valid_lens, int64_t max_steps);

// Greedy decoding of one source with every attention weight kept, for pictures. The steps run as in
// greedy_decode (one token per step with the key/value cache, eval mode, no graph); after each step
// the decoder's weights — one query row per step, (1, H, 1, keys) — are copied into the full
// matrices below. The source is not padded: Ts = its length + 1 (<eos>).
struct DecodedAttention {
  std::vector<int64_t> source;         // (Ts): the content tokens, then <eos>
  std::vector<int64_t> decoder_input;  // (T): <bos>, then each predicted token fed back — one per step
  std::vector<int64_t> prediction;     // the decoded tokens before <eos>
  std::vector<Tensor> encoder;         // per layer (H, Ts, Ts): encoder self-attention
  std::vector<Tensor> decoder_self;    // per layer (H, T, T): causal, 0 above the diagonal
  std::vector<Tensor> cross;           // per layer (H, T, Ts): decoder queries over encoder keys
};
// Throws ValueError for an empty source or max_steps < 1.
DecodedAttention decode_with_attention(nn::EncoderDecoder& model, const std::vector<int64_t>& source,
                                       int64_t max_steps);

struct Evaluation {
  double loss = 0;                  // masked cross-entropy per valid token, teacher forcing
  double token_accuracy = 0;        // argmax = label, over valid label tokens, teacher forcing
  double sequence_accuracy = 0;     // greedy decoding reproduces the whole target
  std::vector<std::vector<int64_t>> predictions;  // greedy, one per example
};
// Evaluates in eval mode under NoGradGuard (then restores the module's mode).
Evaluation evaluate(nn::EncoderDecoder& model, const Task& task, const std::vector<Example>& examples,
                    int64_t batch_size = 256);

}  // namespace ag::seq2seq

#include "examples/seq2seq.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace ag::seq2seq {

// ---- vocabulary -----------------------------------------------------------------------------------

Vocab::Vocab(const std::vector<std::string>& content_tokens) : tokens_{"<pad>", "<bos>", "<eos>"} {
  for (const std::string& t : content_tokens) {
    if (t.empty() || t.find(' ') != std::string::npos || std::count(tokens_.begin(), tokens_.end(), t))
      detail::fail<ValueError>("Vocab: token '", t, "' is empty, has a space or is repeated");
    tokens_.push_back(t);
  }
}

const std::string& Vocab::token(int64_t id) const {
  if (id < 0 || id >= size()) detail::fail<ValueError>("Vocab: id ", id, " is outside [0, ", size(), ")");
  return tokens_[static_cast<std::size_t>(id)];
}

int64_t Vocab::id(const std::string& token) const {
  auto it = std::find(tokens_.begin(), tokens_.end(), token);
  if (it == tokens_.end()) detail::fail<ValueError>("Vocab: unknown token '", token, "'");
  return it - tokens_.begin();
}

std::string Vocab::to_text(const std::vector<int64_t>& ids) const {
  std::string text;
  for (std::size_t i = 0; i < ids.size(); ++i) text += (i ? " " : "") + token(ids[i]);
  return text;
}

std::vector<int64_t> Vocab::from_text(const std::string& text) const {
  std::istringstream words(text);
  std::vector<int64_t> ids;
  for (std::string word; words >> word;) ids.push_back(id(word));
  return ids;
}

// ---- tasks ----------------------------------------------------------------------------------------

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
  explicit SequenceTask(Kind kind) : Task(Vocab(number_tokens(3, 19)), 9, 9), kind_(kind) {}
  std::string name() const override {
    return kind_ == Kind::copy ? "copy" : kind_ == Kind::reverse ? "reverse" : "sort";
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
  AdditionTask() : Task(Vocab([] {
                          auto t = number_tokens(0, 9);
                          t.push_back("+");
                          return t;
                        }()),
                        7, 4) {}
  std::string name() const override { return "add"; }
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
  detail::fail<ValueError>("unknown task '", name, "' (known: copy, reverse, sort, add)");
}

// ---- batches ----------------------------------------------------------------------------------------

Batch make_batch(const std::vector<Example>& examples, int64_t source_steps, int64_t target_steps) {
  const int64_t B = static_cast<int64_t>(examples.size());
  std::vector<float> source(B * source_steps, Vocab::pad), decoder_input(B * target_steps, Vocab::pad),
      labels(B * target_steps, Vocab::pad), source_lens, label_lens;
  for (int64_t b = 0; b < B; ++b) {
    const Example& e = examples[static_cast<std::size_t>(b)];
    const int64_t ls = static_cast<int64_t>(e.source.size()), lt = static_cast<int64_t>(e.target.size());
    if (ls + 1 > source_steps || lt + 1 > target_steps)
      detail::fail<ShapeError>("make_batch: an example of lengths ", ls, " -> ", lt, " does not fit ",
                               source_steps, " source and ", target_steps, " target steps");
    for (int64_t t = 0; t < ls; ++t) source[b * source_steps + t] = float(e.source[t]);
    source[b * source_steps + ls] = Vocab::eos;
    decoder_input[b * target_steps] = Vocab::bos;
    for (int64_t t = 0; t < lt; ++t) {
      decoder_input[b * target_steps + t + 1] = float(e.target[t]);
      labels[b * target_steps + t] = float(e.target[t]);
    }
    labels[b * target_steps + lt] = Vocab::eos;
    source_lens.push_back(float(ls + 1));
    label_lens.push_back(float(lt + 1));
  }
  return {tensor(source, {B, source_steps}), tensor(source_lens, {B}), tensor(decoder_input, {B, target_steps}),
          tensor(labels, {B, target_steps}), tensor(label_lens, {B})};
}

std::vector<Example> held_out_set(const Task& task, int64_t count, uint64_t seed) {
  Generator generator(seed);
  std::set<std::vector<int64_t>> seen;
  std::vector<Example> examples;
  for (int64_t attempts = 0; static_cast<int64_t>(examples.size()) < count; ++attempts) {
    if (attempts > 1000 * count)
      detail::fail<ValueError>("held_out_set: task '", task.name(), "' has fewer than ", count, " distinct examples");
    Example e = task.sample(generator);
    if (seen.insert(e.source).second) examples.push_back(std::move(e));
  }
  return examples;
}

TrainingStream::TrainingStream(const Task& task, const std::vector<Example>& held_out, uint64_t seed)
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

// ---- model ----------------------------------------------------------------------------------------

std::shared_ptr<nn::EncoderDecoder> make_transformer(const ModelConfig& c) {
  // d2l: key_size = query_size = value_size = num_hiddens, norm_shape = [num_hiddens],
  // ffn_num_input = num_hiddens.
  auto encoder = std::make_shared<nn::TransformerEncoder>(
      c.vocab_size, c.num_hiddens, c.num_hiddens, c.num_hiddens, c.num_hiddens, std::vector<int64_t>{c.num_hiddens},
      c.num_hiddens, c.ffn_num_hiddens, c.num_heads, c.num_layers, c.dropout);
  auto decoder = std::make_shared<nn::TransformerDecoder>(
      c.vocab_size, c.num_hiddens, c.num_hiddens, c.num_hiddens, c.num_hiddens, std::vector<int64_t>{c.num_hiddens},
      c.num_hiddens, c.ffn_num_hiddens, c.num_heads, c.num_layers, c.dropout);
  auto model = std::make_shared<nn::EncoderDecoder>(encoder, decoder);
  // d2l's train_seq2seq: xavier_uniform_ on the weight of every nn.Linear.
  model->apply([](nn::Module& m) {
    if (auto* linear = dynamic_cast<nn::Linear*>(&m)) nn::init::xavier_uniform_(linear->weight);
  });
  return model;
}

// ---- checkpoints -------------------------------------------------------------------------------------

void save_model_config(Checkpoint& c, const std::string& task, const ModelConfig& config) {
  c.strings["config.task"] = task;
  c.integers["config.vocab_size"] = static_cast<uint64_t>(config.vocab_size);
  c.integers["config.num_hiddens"] = static_cast<uint64_t>(config.num_hiddens);
  c.integers["config.ffn_num_hiddens"] = static_cast<uint64_t>(config.ffn_num_hiddens);
  c.integers["config.num_heads"] = static_cast<uint64_t>(config.num_heads);
  c.integers["config.num_layers"] = static_cast<uint64_t>(config.num_layers);
  c.reals["config.dropout"] = config.dropout;
}

ModelConfig load_model_config(const Checkpoint& c) {
  ModelConfig config;
  auto size = [&](const char* name) {
    const uint64_t v = c.integer(name);
    if (v == 0 || v > (1u << 20)) throw CheckpointError(std::string("checkpoint: ") + name + " = " + std::to_string(v) + " is not a model size");
    return static_cast<int64_t>(v);
  };
  config.vocab_size = size("config.vocab_size");
  config.num_hiddens = size("config.num_hiddens");
  config.ffn_num_hiddens = size("config.ffn_num_hiddens");
  config.num_heads = size("config.num_heads");
  config.num_layers = size("config.num_layers");
  config.dropout = c.real("config.dropout");
  if (config.num_hiddens % config.num_heads != 0 || !(config.dropout >= 0 && config.dropout < 1))
    throw CheckpointError("checkpoint: the model configuration is inconsistent");
  return config;
}

void save_model(const std::string& path, const nn::EncoderDecoder& model, const std::string& task,
                const ModelConfig& config, CheckpointFormat format) {
  Checkpoint c;
  c.kind = "model";
  for (const auto& [name, t] : model.state_dict()) c.tensors["model." + name] = t;
  save_model_config(c, task, config);
  save_checkpoint(c, path, {format, {}});
}

LoadedModel load_model(const std::string& path) {
  const Checkpoint c = load_checkpoint(path);
  LoadedModel loaded;
  loaded.task = make_task(c.string("config.task"));
  loaded.config = load_model_config(c);
  if (loaded.config.vocab_size != loaded.task->vocab().size())
    throw CheckpointError("checkpoint " + path + ": vocabulary of " + std::to_string(loaded.config.vocab_size) +
                          " does not fit task '" + loaded.task->name() + "'");
  loaded.model = make_transformer(loaded.config);
  loaded.model->load_state_dict(c.tensors_under("model"));
  loaded.model->eval();
  return loaded;
}

// ---- training ---------------------------------------------------------------------------------------

double train_step(nn::EncoderDecoder& model, optim::Optimizer& optimizer, const Batch& batch, double clip) {
  Tensor logits = model.forward(batch.source, batch.decoder_input, batch.source_valid_lens);  // (B, Tt, V)
  Tensor loss = nn::masked_softmax_ce(logits, batch.labels, batch.label_valid_lens);          // ()
  optimizer.zero_grad();
  loss.backward();  // frees the graph
  optim::clip_grad_norm(model.parameters(), clip);
  optimizer.step();
  return loss.item();
}

// ---- decoding and evaluation ----------------------------------------------------------------------

std::vector<std::vector<int64_t>> greedy_decode(nn::EncoderDecoder& model, const Tensor& source,
                                                const Tensor& source_valid_lens, int64_t max_steps) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const int64_t B = source.size(0);
  Tensor enc_outputs = model.encoder->forward(source, source_valid_lens);  // (B, Ts, D)
  nn::DecoderState state = model.decoder->init_state(enc_outputs, source_valid_lens);
  Tensor next = full({B, 1}, static_cast<double>(Vocab::bos));  // (B, 1)
  std::vector<std::vector<int64_t>> predictions(static_cast<std::size_t>(B));
  std::vector<bool> done(static_cast<std::size_t>(B), false);
  for (int64_t step = 0; step < max_steps; ++step) {
    Tensor logits = model.decoder->forward(next, state);  // (B, 1, V): one new position, cached past
    next = argmax(logits, -1);                            // (B, 1)
    const std::vector<float> ids = next.to_vector<float>();
    bool all_done = true;
    for (int64_t b = 0; b < B; ++b) {
      if (done[b]) continue;
      const int64_t id = static_cast<int64_t>(ids[b]);
      if (id == Vocab::eos) done[b] = true;
      else predictions[b].push_back(id);
      all_done = all_done && done[b];
    }
    if (all_done) break;
  }
  model.train(was_training);
  return predictions;
}

DecodedAttention decode_with_attention(nn::EncoderDecoder& model, const std::vector<int64_t>& source,
                                       int64_t max_steps) {
  if (source.empty() || max_steps < 1)
    detail::fail<ValueError>("decode_with_attention: a source of ", source.size(), " tokens and max_steps ", max_steps,
                             " (need at least one of each)");
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  DecodedAttention result;
  result.source = source;
  result.source.push_back(Vocab::eos);
  const int64_t Ts = static_cast<int64_t>(result.source.size());
  std::vector<float> source_ids(result.source.begin(), result.source.end());
  Tensor enc_X = tensor(source_ids, {1, Ts});                          // (1, Ts)
  Tensor enc_valid_lens = tensor(std::vector<float>{float(Ts)}, {1});  // (1,): nothing is padding
  Tensor enc_outputs = model.encoder->forward(enc_X, enc_valid_lens);  // (1, Ts, D)
  for (const Tensor& w : model.encoder->attention_weights())           // per layer (1, H, Ts, Ts)
    result.encoder.push_back(tensor(w.select(0, 0).to_vector<float>(), {w.size(1), Ts, Ts}));  // (H, Ts, Ts)

  nn::DecoderState state = model.decoder->init_state(enc_outputs, enc_valid_lens);
  const std::size_t layers = static_cast<std::size_t>(model.decoder->num_layers);
  // Per layer, per step t: the step's query row of every head, (H, 1, t + 1) and (H, 1, Ts), flat.
  std::vector<std::vector<std::vector<float>>> self_rows(layers), cross_rows(layers);
  int64_t H = 0;
  int64_t next = Vocab::bos;
  for (int64_t step = 0; step < max_steps; ++step) {
    result.decoder_input.push_back(next);
    Tensor logits = model.decoder->forward(tensor(std::vector<float>{float(next)}, {1, 1}), state);  // (1, 1, V)
    const std::vector<Tensor> self = model.decoder->self_attention_weights();    // per layer (1, H, 1, step + 1)
    const std::vector<Tensor> cross = model.decoder->cross_attention_weights();  // per layer (1, H, 1, Ts)
    for (std::size_t l = 0; l < layers; ++l) {
      self_rows[l].push_back(self[l].to_vector<float>());
      cross_rows[l].push_back(cross[l].to_vector<float>());
    }
    H = self[0].size(1);
    next = static_cast<int64_t>(argmax(logits, -1).item());
    if (next == Vocab::eos) break;
    result.prediction.push_back(next);
  }
  model.train(was_training);

  // Stack the rows: query t of head h holds t + 1 self-attention weights (keys 0 … t; the keys
  // after t did not exist yet, weight 0) and Ts encoder–decoder weights.
  const int64_t T = static_cast<int64_t>(result.decoder_input.size());
  for (std::size_t l = 0; l < layers; ++l) {
    std::vector<float> self(static_cast<std::size_t>(H * T * T), 0.0f), cross(static_cast<std::size_t>(H * T * Ts));
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const std::vector<float>& s = self_rows[l][static_cast<std::size_t>(t)];   // (H, 1, t + 1)
        const std::vector<float>& c = cross_rows[l][static_cast<std::size_t>(t)];  // (H, 1, Ts)
        for (int64_t k = 0; k <= t; ++k) self[(h * T + t) * T + k] = s[h * (t + 1) + k];
        for (int64_t k = 0; k < Ts; ++k) cross[(h * T + t) * Ts + k] = c[h * Ts + k];
      }
    result.decoder_self.push_back(tensor(self, {H, T, T}));  // (H, T, T)
    result.cross.push_back(tensor(cross, {H, T, Ts}));       // (H, T, Ts)
  }
  return result;
}

Evaluation evaluate(nn::EncoderDecoder& model, const Task& task, const std::vector<Example>& examples,
                    int64_t batch_size) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  Evaluation result;
  double loss_sum = 0, tokens = 0, correct_tokens = 0, correct_sequences = 0;
  for (std::size_t start = 0; start < examples.size(); start += static_cast<std::size_t>(batch_size)) {
    std::vector<Example> chunk(examples.begin() + static_cast<std::ptrdiff_t>(start),
                               examples.begin() + static_cast<std::ptrdiff_t>(std::min(examples.size(), start + batch_size)));
    Batch batch = make_batch(chunk, task.source_steps(), task.target_steps());
    // Teacher forcing: loss and token accuracy over the valid label positions.
    Tensor logits = model.forward(batch.source, batch.decoder_input, batch.source_valid_lens);  // (B, Tt, V)
    const double valid = sum(batch.label_valid_lens).item();
    loss_sum += nn::masked_softmax_ce(logits, batch.labels, batch.label_valid_lens).item() * valid;
    tokens += valid;
    const std::vector<float> predicted = argmax(logits, -1).to_vector<float>();
    const std::vector<float> labels = batch.labels.to_vector<float>();
    const std::vector<float> lens = batch.label_valid_lens.to_vector<float>();
    const int64_t Tt = task.target_steps();
    for (int64_t b = 0; b < batch.size(); ++b)
      for (int64_t t = 0; t < static_cast<int64_t>(lens[b]); ++t)
        correct_tokens += predicted[b * Tt + t] == labels[b * Tt + t];
    // Greedy decoding: the whole target must come out, then <eos>.
    auto decoded = greedy_decode(model, batch.source, batch.source_valid_lens, Tt);
    for (std::size_t i = 0; i < chunk.size(); ++i) {
      correct_sequences += decoded[i] == chunk[i].target;
      result.predictions.push_back(std::move(decoded[i]));
    }
  }
  model.train(was_training);
  result.loss = loss_sum / tokens;
  result.token_accuracy = correct_tokens / tokens;
  result.sequence_accuracy = correct_sequences / static_cast<double>(examples.size());
  return result;
}

}  // namespace ag::seq2seq

#include "models/lm.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "nn/init.h"

namespace ag::lm {

namespace {
// Eval mode for the guard's life; the module's mode is restored on the way out, even by an error.
class EvalMode {
 public:
  explicit EvalMode(nn::Module& module) : module_(module), was_training_(module.is_training()) {
    module_.eval();
  }
  ~EvalMode() { module_.train(was_training_); }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;

 private:
  nn::Module& module_;
  bool was_training_;
};
}  // namespace

// ---- tokens -------------------------------------------------------------------------------------

std::string tokenizer_name(Tokenizer tokenizer) {
  return tokenizer == Tokenizer::chars ? "char" : "word";
}

Tokenizer parse_tokenizer(const std::string& name, const std::string& what) {
  if (name == "char") return Tokenizer::chars;
  if (name == "word") return Tokenizer::words;
  fail<ValueError>(what, ": unknown tokenizer '", name, "' (known: char, word)");
}

TokenizedText tokenize(std::string_view text, Tokenizer tokenizer) {
  TokenizedText out;
  if (tokenizer == Tokenizer::chars) {
    out.tokens = data::tokenize_chars(text);
    out.characters.assign(out.tokens.size(), 1);
    return out;
  }
  const std::string preprocessed = data::preprocess_nmt(text);
  std::string_view rest = preprocessed;
  while (!rest.empty()) {
    const std::size_t end = rest.find('\n');
    const std::string_view line = rest.substr(0, end);
    for (const std::string& word : data::tokenize_words(line)) {
      if (word.empty()) continue;  // repeated spaces
      out.tokens.push_back(word);
      out.characters.push_back(static_cast<int64_t>(data::count_code_points(word)) + 1);
    }
    if (end == std::string_view::npos) break;
    out.tokens.emplace_back("\n");
    out.characters.push_back(0);
    rest.remove_prefix(end + 1);
  }
  return out;
}

std::string detokenize(const std::vector<std::string>& tokens, Tokenizer tokenizer) {
  std::string text;
  bool line_start = true;
  for (const std::string& token : tokens) {
    if (tokenizer == Tokenizer::words && token != "\n" && !line_start) text += ' ';
    text += token;
    line_start = token == "\n";
  }
  return text;
}

std::pair<std::string, std::string> split_text(std::string_view text, double train_fraction) {
  if (!(train_fraction >= 0 && train_fraction <= 1))
    fail<ValueError>("split_text: train_fraction ", train_fraction, " is outside [0, 1]");
  if (const std::string problem = data::utf8_problem(text, "split_text"); !problem.empty())
    fail<ValueError>(problem);
  const std::size_t n = data::count_code_points(text);
  const auto train_chars = static_cast<std::size_t>(static_cast<double>(n) * train_fraction);
  std::size_t byte = 0;
  for (std::size_t c = 0; c < train_chars; ++c)
    byte += data::utf8_length(static_cast<unsigned char>(text[byte]));
  return {std::string(text.substr(0, byte)), std::string(text.substr(byte))};
}

// ---- the model ----------------------------------------------------------------------------------

nn::LanguageModelConfig char_small_config(int64_t vocab_size) {
  nn::LanguageModelConfig c;
  c.vocab_size = vocab_size;
  c.num_hiddens = 128;
  c.num_heads = 4;
  c.num_layers = 4;
  c.ffn_num_hiddens = 512;
  c.block_size = 64;
  c.dropout = 0.1;
  return c;
}

std::shared_ptr<nn::LanguageModel> make_language_model(const nn::LanguageModelConfig& config) {
  auto model = std::make_shared<nn::LanguageModel>(config);
  // d2l's training loops: xavier_uniform_ on the weight of every nn.Linear.
  model->apply([](nn::Module& m) {
    if (auto* linear = dynamic_cast<nn::Linear*>(&m)) nn::init::xavier_uniform_(linear->weight);
  });
  return model;
}

uint64_t parameter_count(const nn::LanguageModelConfig& c) {
  const auto V = static_cast<uint64_t>(c.vocab_size), D = static_cast<uint64_t>(c.num_hiddens);
  const auto F = static_cast<uint64_t>(c.ffn_num_hiddens), L = static_cast<uint64_t>(c.num_layers);
  // W_k and W_v project to the key/value heads: Hkv · D/H features each.
  const uint64_t kv_width =
      static_cast<uint64_t>(c.kv_heads()) * (D / static_cast<uint64_t>(c.num_heads));
  // Per block: W_q and W_o (D×D), W_k and W_v (D×kv_width), no bias; the FFN: D×F + F + F×D + D
  // (relu), or three D×F matrices without bias (swiglu); two norms: weight and bias (LayerNorm) or
  // a weight (RMSNorm).
  const uint64_t attention = 2 * D * D + 2 * D * kv_width;
  const uint64_t ffn = c.ffn == nn::FeedForward::swiglu ? 3 * D * F : 2 * D * F + F + D;
  const uint64_t norm = c.norm == nn::Normalization::rms ? D : 2 * D;
  uint64_t count = V * D + L * (attention + ffn + 2 * norm);  // embedding, blocks
  if (c.positions == nn::PositionScheme::learned) count += static_cast<uint64_t>(c.block_size) * D;
  if (c.pre_norm) count += norm;           // ln_f
  if (!c.tie_weights) count += V * D + V;  // dense
  return count;
}

uint64_t state_dict_numbers(const nn::LanguageModelConfig& c) {
  // ag's checkpoints hold the sinusoid table too (a buffer); the other schemes have no buffer.
  return parameter_count(c) + (c.positions == nn::PositionScheme::sinusoidal
                                      ? static_cast<uint64_t>(c.block_size * c.num_hiddens)
                                      : 0);
}

void check_config(const nn::LanguageModelConfig& c, bool options) {
  constexpr int64_t largest = int64_t{1} << 20;
  auto name = [&](const char* option, const char* entry) {
    return std::string(options ? option : entry);
  };
  const std::pair<const char*, const char*> names[] = {{"--vocab-size", "config.vocab_size"},
      {"--num-hiddens", "config.num_hiddens"}, {"--heads", "config.num_heads"},
      {"--layers", "config.num_layers"}, {"--ffn-num-hiddens", "config.ffn_num_hiddens"},
      {"--block-size", "config.block_size"}};
  const int64_t values[] = {
      c.vocab_size, c.num_hiddens, c.num_heads, c.num_layers, c.ffn_num_hiddens, c.block_size};
  for (std::size_t i = 0; i < std::size(values); ++i)
    if (values[i] < 1 || values[i] > largest)
      fail<ValueError>(
          name(names[i].first, names[i].second), " ", values[i], " is outside 1-", largest);
  if (c.num_hiddens % c.num_heads != 0)
    fail<ValueError>(name("--heads", "config.num_heads"), " ", c.num_heads, " does not divide ",
        name("--num-hiddens", "config.num_hiddens"), " ", c.num_hiddens);
  if (c.num_kv_heads < 0 || (c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads != 0))
    fail<ValueError>(name("--kv-heads", "config.num_kv_heads"), " ", c.num_kv_heads,
        " does not divide ", name("--heads", "config.num_heads"), " ", c.num_heads,
        " (0: as many as the heads)");
  if (!(c.dropout >= 0 && c.dropout < 1))
    fail<ValueError>(name("--dropout", "config.dropout"), " ", c.dropout, " is outside [0, 1)");
  if (c.norm == nn::Normalization::rms && !c.pre_norm)
    fail<ValueError>(name("--norm", "config.norm"), " rms needs pre-norm blocks (",
        name("--pre-norm", "config.pre_norm"), "): d2l's post-norm AddNorm is a LayerNorm");
  if (c.positions == nn::PositionScheme::rope) {
    if ((c.num_hiddens / c.num_heads) % 2 != 0)
      fail<ValueError>(name("--positions", "config.positions"),
          " rope turns pairs of features: ", "the head width ", c.num_hiddens / c.num_heads, " (",
          name("--num-hiddens", "config.num_hiddens"), " / ", name("--heads", "config.num_heads"),
          ") must be even");
    if (!(c.rope_base > 1) || !std::isfinite(c.rope_base))
      fail<ValueError>(name("--rope-base", "config.rope_base"), " ", c.rope_base,
          " must be a finite number above 1");
  }
}

// ---- training -----------------------------------------------------------------------------------

Tensor lm_loss(nn::LanguageModel& model, const Tensor& inputs, const Tensor& labels) {
  if (inputs.dim() != 2 || labels.shape() != inputs.shape())
    fail<ShapeError>("lm_loss: inputs ", shape_str(inputs.shape()), " and labels ",
        shape_str(labels.shape()), " must both be (B, T)");
  const int64_t V = model.config.vocab_size;
  Tensor logits = model.forward(inputs);                                // (B, T, V)
  return cross_entropy(logits.reshape({-1, V}), labels.reshape({-1}));  // (B·T, V), (B·T) -> ()
}

double train_step(nn::LanguageModel& model, optim::Optimizer& optimizer, const Tensor& inputs,
    const Tensor& labels, double clip) {
  Tensor loss = lm_loss(model, inputs, labels);  // ()
  optimizer.zero_grad();
  loss.backward();  // frees the graph
  optim::clip_grad_norm(model.parameters(), clip);
  optimizer.step();
  return loss.item();
}

Evaluation evaluate(nn::LanguageModel& model, const std::vector<int64_t>& ids,
    const std::vector<int64_t>& characters, int64_t max_windows, int64_t batch_size) {
  const int64_t T = model.config.block_size, n = static_cast<int64_t>(ids.size());
  if (n < T + 1)
    fail<ValueError>("lm::evaluate: ", n,
        " validation tokens are fewer than block_size + 1 = ", T + 1,
        " (a longer text, or a smaller --block-size)");
  if (max_windows < 1 || batch_size < 1)
    fail<ValueError>("lm::evaluate: max_windows ", max_windows, " and batch_size ", batch_size,
        " must be positive");
  if (!characters.empty() && characters.size() != ids.size())
    fail<ValueError>("lm::evaluate: ", characters.size(), " character counts for ", n, " tokens");
  NoGradGuard no_grad;
  EvalMode eval_mode(model);
  Evaluation e;
  // Window w covers ids[w·T … w·T + T]: it needs w·T + T + 1 <= n.
  e.windows = std::min(max_windows, (n - 1) / T);
  double nats = 0;
  for (int64_t first = 0; first < e.windows; first += batch_size) {
    const int64_t B = std::min(batch_size, e.windows - first);
    std::vector<float> inputs(static_cast<std::size_t>(B * T)), labels(inputs.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const std::size_t at = static_cast<std::size_t>((first + b) * T + t);
        inputs[static_cast<std::size_t>(b * T + t)] = static_cast<float>(ids[at]);
        labels[static_cast<std::size_t>(b * T + t)] = static_cast<float>(ids[at + 1]);
        e.characters += characters.empty() ? 1 : characters[at + 1];
      }
    Tensor loss = lm_loss(model, tensor(inputs, {B, T}), tensor(labels, {B, T}));  // ()
    nats += loss.item() * static_cast<double>(B * T);
  }
  e.tokens = e.windows * T;
  e.loss = nats / static_cast<double>(e.tokens);
  e.perplexity = std::exp(e.loss);
  e.bits_per_character =
      e.characters > 0 ? nats / std::log(2.0) / static_cast<double>(e.characters) : 0.0;
  return e;
}

std::vector<double> loss_by_position(nn::LanguageModel& model, const std::vector<int64_t>& ids,
    int64_t context, int64_t max_windows, int64_t batch_size) {
  const int64_t C = context, n = static_cast<int64_t>(ids.size());
  if (C < 1 || max_windows < 1 || batch_size < 1)
    fail<ValueError>("lm::loss_by_position: context ", C, ", max_windows ", max_windows,
        " and batch_size ", batch_size, " must be positive");
  if (n < C + 1)
    fail<ValueError>(
        "lm::loss_by_position: ", n, " tokens are fewer than a window of context + 1 = ", C + 1);
  NoGradGuard no_grad;
  EvalMode eval_mode(model);
  const int64_t windows = std::min(max_windows, (n - 1) / C);
  std::vector<double> nats(static_cast<std::size_t>(C), 0.0);  // Σ over the windows, per position
  for (int64_t first = 0; first < windows; first += batch_size) {
    const int64_t B = std::min(batch_size, windows - first);
    std::vector<int64_t> inputs(static_cast<std::size_t>(B * C)), labels(inputs.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < C; ++t) {
        const std::size_t at = static_cast<std::size_t>((first + b) * C + t);
        inputs[static_cast<std::size_t>(b * C + t)] = ids[at];
        labels[static_cast<std::size_t>(b * C + t)] = ids[at + 1];
      }
    Tensor logits = model.forward(tensor(inputs, {B, C}));                    // (B, C, V)
    Tensor log_p = log_softmax(logits, -1);                                   // (B, C, V)
    Tensor picked = gather(log_p, -1, tensor(labels, {B, C}).unsqueeze(-1));  // (B, C, 1)
    const std::vector<double> row = neg(picked.sum(0)).to_vector<double>();  // (C, 1): Σ_b −log p
    for (int64_t t = 0; t < C; ++t)
      nats[static_cast<std::size_t>(t)] += row[static_cast<std::size_t>(t)];
  }
  for (double& v : nats) v /= static_cast<double>(windows);
  return nats;
}

// ---- sampling -----------------------------------------------------------------------------------

void check_sampling(const Sampling& s, int64_t vocab_size) {
  if (!(s.temperature >= 0) || !std::isfinite(s.temperature))
    fail<ValueError>("temperature ", s.temperature, " must be a number >= 0 (0: greedy)");
  if (s.top_k < 0 || s.top_k > vocab_size)
    fail<ValueError>("top-k ", s.top_k, " is outside 0-", vocab_size,
        " (the vocabulary's size; 0: every token)");
}

int64_t sample_token(
    const std::vector<double>& logits, const Sampling& sampling, Generator& generator) {
  const auto V = static_cast<int64_t>(logits.size());
  if (V == 0) fail<ValueError>("sample_token: no logits");
  check_sampling(sampling, V);
  if (sampling.temperature == 0)
    return std::max_element(logits.begin(), logits.end()) - logits.begin();  // the first largest
  // nanoGPT: v, _ = torch.topk(logits, k); logits[logits < v[:, [-1]]] = -inf
  double threshold = -std::numeric_limits<double>::infinity();
  if (sampling.top_k > 0 && sampling.top_k < V) {
    std::vector<double> sorted = logits;
    std::nth_element(sorted.begin(), sorted.begin() + (sampling.top_k - 1), sorted.end(),
        std::greater<double>());
    threshold = sorted[static_cast<std::size_t>(sampling.top_k - 1)];  // the k-th largest
  }
  // p_i = exp((l_i − max) / T) / Σ_j exp((l_j − max) / T) over the kept logits.
  const double largest = *std::max_element(logits.begin(), logits.end());
  std::vector<double> weights(logits.size(), 0.0);
  double total = 0;
  for (std::size_t i = 0; i < logits.size(); ++i)
    if (logits[i] >= threshold) {
      weights[i] = std::exp((logits[i] - largest) / sampling.temperature);
      total += weights[i];
    }
  const double u = generator.next_double() * total;  // U[0, 1) · Σ: no division per token
  double cumulative = 0;
  int64_t last_kept = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] == 0) continue;
    cumulative += weights[i];
    last_kept = static_cast<int64_t>(i);
    if (u < cumulative) return last_kept;
  }
  return last_kept;  // u within rounding of the total
}

std::vector<int64_t> generate(nn::LanguageModel& model, const std::vector<int64_t>& prompt,
    int64_t max_new, const Sampling& sampling, Generator& generator, bool use_cache,
    std::vector<std::vector<double>>* step_logits) {
  // The window: block_size tokens, or the context extend_context set.
  const int64_t V = model.config.vocab_size, block = model.max_context();
  if (prompt.empty()) fail<ValueError>("generate: the prompt is empty (it needs one token)");
  if (max_new < 0) fail<ValueError>("generate: max_new ", max_new, " is negative");
  check_sampling(sampling, V);
  for (int64_t id : prompt)
    if (id < 0 || id >= V)
      fail<ValueError>("generate: prompt token ", id, " is outside the vocabulary 0-", V - 1);
  NoGradGuard no_grad;
  EvalMode eval_mode(model);
  const DType dtype = model.embedding->weight.dtype();
  std::vector<int64_t> context = prompt;
  // The last min(block_size, size) tokens of the context, (1, T).
  auto window = [&] {
    const int64_t T = std::min<int64_t>(block, static_cast<int64_t>(context.size()));
    std::vector<double> ids(context.end() - T, context.end());
    return tensor(ids, {1, T}, dtype);
  };
  // Relative positions: once the window is full, the cache slides (the oldest position dropped)
  // instead of being rebuilt.
  const bool slides = nn::relative_positions(model.config.positions);
  nn::KVCache cache = model.make_cache();
  std::vector<int64_t> generated;
  Tensor logits;  // (1, T, V): the last forward's; its last row predicts the next token
  for (int64_t step = 0; step < max_new; ++step) {
    if (!use_cache) {
      logits = model.forward(window());
    } else if (step == 0 || (cache.length() == block && !slides)) {
      // The prompt, or a full context that cropping shifts: (re)build the cache from the window.
      cache.clear();
      logits = model.forward(window(), &cache);
    } else {
      if (cache.length() == block) cache.drop_oldest(1);  // relative positions: slide
      logits = model.forward(tensor(std::vector<double>{double(context.back())}, {1, 1}, dtype),
          &cache);  // (1, 1, V): only the new token's query, key and value
    }
    std::vector<double> row = logits.select(1, logits.size(1) - 1).to_vector<double>();  // (V)
    const int64_t next = sample_token(row, sampling, generator);
    if (step_logits != nullptr) step_logits->push_back(std::move(row));
    context.push_back(next);
    generated.push_back(next);
  }
  return generated;
}

}  // namespace ag::lm

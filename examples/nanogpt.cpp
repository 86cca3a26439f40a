// ag-nanogpt — nanoGPT (Karpathy's model.py and train.py) in C++, on ag: the same GPT, the same
// recipe, the same log lines, trained on a text's characters. It reads top to bottom as the two
// Python files do: the data (nanoGPT's data/shakespeare_char/prepare.py and get_batch), the model
// (model.py: CausalSelfAttention, MLP, Block, GPT), then the training loop (train.py). What
// ag::training adds — checkpoints with an exact --resume, data parallelism under mpirun, Ctrl-C
// that saves — is a few calls around the loop (examples/train_classifier.cpp shows them alone).
// docs/nanogpt.md maps each Python line to its C++ line.
//
//   ag-nanogpt                                  # nanoGPT's CPU recipe on Debian's fortunes
//   ag-nanogpt --text input.txt --sample 500    # your text, then 500 sampled characters
//   ag-nanogpt --checkpoint ckpt.agc --stop-after 500
//   ag-nanogpt --resume ckpt.agc                # continues exactly, bit for bit
//   mpirun -np 2 ag-nanogpt                     # each rank takes half of every batch
//
// The defaults are the README's recipe for a CPU (train_shakespeare_char.py with --device=cpu
// --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4
// --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0). bench/nanogpt_torch.py is
// the same program in PyTorch, and bench/compare_nanogpt.sh runs the two side by side.
//
// Where this differs from nanoGPT, on purpose:
//   - the batches' offsets come from a SplitMix64 stream seeded with --seed (BatchStream below),
//     not from torch.randint, so that bench/nanogpt_torch.py draws the very same batches;
//   - iteration numbers: nanoGPT's iter N is the update that takes the model from N to N + 1
//     updates. "step N: …" is printed after N updates, as nanoGPT's; the run ends after
//     --max-iters updates with the evaluation of that step (nanoGPT takes one more update after
//     it, whose result it does not evaluate), and there is always an evaluation at the end;
//   - the checkpoint is saved at every evaluation (nanoGPT's always_save_checkpoint) and at the
//     end, with ag::training's format, not only when the validation loss improves; it still holds
//     best_val_loss;
//   - "iter N: loss X" is the whole batch's loss (with --gradient-accumulation-steps, the mean over
//     the micro-batches, not the last one's), and its time is the step's alone (nanoGPT's includes
//     an evaluation that happened before it); there is no MFU estimate.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <map>
#include <set>

#include "autograd/ops.h"
#include "data/text_corpus.h"
#include "data/utf8.h"
#include "distributed/distributed.h"
#include "io/checkpoint.h"
#include "models/lm.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "training/cli.h"
#include "training/profile.h"
#include "training/report.h"
#include "training/step.h"

namespace {

using namespace ag;

const std::string kProgram = "ag-nanogpt";

// ==== the configuration: train.py's globals, with their names ====================================

struct Config {
  // I/O
  int64_t eval_interval = 250;
  int64_t log_interval = 1;
  int64_t eval_iters = 20;
  std::string text;  // "": Debian's fortunes (nanoGPT: dataset = 'shakespeare_char')
  // data
  int64_t gradient_accumulation_steps = 1;
  int64_t batch_size = 12;  // the micro-batch, when gradient_accumulation_steps > 1
  int64_t block_size = 64;
  // model
  int64_t n_layer = 4, n_head = 4, n_embd = 128;
  double dropout = 0.0;
  bool bias = false;  // bias inside the LayerNorms and Linears?
  // adamw optimizer
  double learning_rate = 1e-3;
  int64_t max_iters = 2000;
  double weight_decay = 1e-1;
  double beta1 = 0.9, beta2 = 0.99;
  double grad_clip = 1.0;  // 0: no clipping
  // learning rate decay settings
  int64_t warmup_iters = 100;
  int64_t lr_decay_iters = 2000;
  double min_lr = 1e-4;
  // system
  uint64_t seed = 1337;  // nanoGPT: torch.manual_seed(1337 + seed_offset)
  // sampling at the end (nanoGPT's sample.py)
  int64_t sample = 0;  // characters to sample; 0: none
  double temperature = 0.8;
  int64_t top_k = 200;
};

// The largest sizes accepted: the checks come before anything is allocated.
constexpr int64_t kMaxWidth = 1 << 16, kMaxLayers = 1024, kMaxBlock = 1 << 20;

// Why the configuration cannot run ("" if it can), in nanoGPT's option names.
std::string config_problem(const Config& c) {
  auto positive = [](double x) { return x > 0 && std::isfinite(x); };
  auto non_negative = [](double x) { return x >= 0 && std::isfinite(x); };
  if (c.n_embd % c.n_head != 0)  // model.py: assert config.n_embd % config.n_head == 0
    return "--n-head " + std::to_string(c.n_head) + " does not divide --n-embd " +
           std::to_string(c.n_embd);
  if (c.batch_size * c.gradient_accumulation_steps > training::kMaxBatchSize)
    return "--batch-size x --gradient-accumulation-steps is above " +
           std::to_string(training::kMaxBatchSize) + " rows";
  if (!(c.dropout >= 0 && c.dropout < 1)) return "--dropout must be in [0, 1)";
  if (!positive(c.learning_rate)) return "--learning-rate must be a positive number";
  if (!non_negative(c.min_lr) || c.min_lr > c.learning_rate)
    return "--min-lr must be in [0, --learning-rate]";
  if (c.warmup_iters >= c.lr_decay_iters)
    return "--warmup-iters must be below --lr-decay-iters (get_lr's cosine runs between them)";
  if (!non_negative(c.weight_decay)) return "--weight-decay must not be negative";
  if (!(c.beta1 >= 0 && c.beta1 < 1) || !(c.beta2 >= 0 && c.beta2 < 1))
    return "--beta1 and --beta2 must be in [0, 1)";
  if (!non_negative(c.grad_clip)) return "--grad-clip must not be negative (0: no clipping)";
  if (!(c.temperature >= 0) || !std::isfinite(c.temperature))
    return "--temperature must not be negative (0: the most likely character)";
  return "";
}

// ==== the data: prepare.py and get_batch =========================================================

// prepare.py: every character of the text is a token; the vocabulary is the sorted set of the
// characters (Unicode code points) of the whole text; the first 90 % of the characters train, the
// rest validate.
struct Dataset {
  std::u32string itos;               // id -> character
  std::map<char32_t, int64_t> stoi;  // character -> id
  std::vector<int64_t> train, val;   // the two splits' ids
  int64_t characters = 0;
  uint32_t crc = 0;  // of the text: a resumed run must read the same one
};

Dataset prepare(const std::string& path) {
  const data::TextCorpus corpus =
      path.empty() ? data::read_fortunes() : data::read_text_files({path});
  Dataset d;
  d.crc = crc32(corpus.text);
  const std::u32string text = data::decode_utf8(corpus.text, path);
  // chars = sorted(list(set(data)))
  const std::set<char32_t> chars(text.begin(), text.end());
  d.itos.assign(chars.begin(), chars.end());
  for (std::size_t i = 0; i < d.itos.size(); ++i) d.stoi[d.itos[i]] = static_cast<int64_t>(i);
  // n = len(data); train_data = data[:int(n*0.9)]; val_data = data[int(n*0.9):]
  d.characters = static_cast<int64_t>(text.size());
  const auto n_train = static_cast<std::size_t>(static_cast<double>(text.size()) * 0.9);
  for (std::size_t i = 0; i < text.size(); ++i)
    (i < n_train ? d.train : d.val).push_back(d.stoi.at(text[i]));
  return d;
}

std::string decode(const Dataset& d, const std::vector<int64_t>& ids) {
  std::u32string text;
  for (int64_t id : ids) text.push_back(d.itos[static_cast<std::size_t>(id)]);
  return data::encode_utf8(text);
}

// Where each batch's windows start: nanoGPT's torch.randint(len(data) - block_size, (B,)), drawn
// here from SplitMix64 (Steele, Lea & Flood 2014), six lines that bench/nanogpt_torch.py writes
// again in Python, so that both programs train and evaluate on the very same windows. An offset
// is next() mod (len(data) − block_size): its bias, under 2^-40 here, is far below the noise.
// Every rank draws every offset (the whole batch), so the stream is the same on every rank.
class BatchStream {
 public:
  explicit BatchStream(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t& state() { return state_; }  // saved with the run and restored on --resume

 private:
  uint64_t state_;
};

// x: the windows data[i : i + block_size], y: the same shifted by one, data[i + 1 : i + 1 +
// block_size] — each y[b, t] is the character that follows x[b, 0..t].
struct Batch {
  Tensor x, y;  // (rows, T) int64
};

Batch get_batch(
    const std::vector<int64_t>& data, int64_t rows, int64_t block_size, BatchStream& stream) {
  const auto range = static_cast<uint64_t>(data.size()) - static_cast<uint64_t>(block_size);
  std::vector<int64_t> x, y;
  for (int64_t b = 0; b < rows; ++b) {
    const auto i = static_cast<std::ptrdiff_t>(stream.next() % range);
    x.insert(x.end(), data.begin() + i, data.begin() + i + block_size);
    y.insert(y.end(), data.begin() + i + 1, data.begin() + i + 1 + block_size);
  }
  return {tensor(x, {rows, block_size}), tensor(y, {rows, block_size})};
}

// ==== the model: model.py ========================================================================

struct GPTConfig {
  int64_t block_size = 64, vocab_size = 0, n_layer = 4, n_head = 4, n_embd = 128;
  double dropout = 0.0;
  bool bias = false;  // True: bias in Linears and LayerNorms, like GPT-2. False: a bit better and
                      // faster
};

class CausalSelfAttention : public nn::Module {
 public:
  explicit CausalSelfAttention(const GPTConfig& config)
      : n_head(config.n_head), n_embd(config.n_embd), dropout(config.dropout) {
    // key, query, value projections for all heads, but in a batch: one Linear
    c_attn =
        register_module("c_attn", std::make_shared<nn::Linear>(n_embd, 3 * n_embd, config.bias));
    // output projection
    c_proj = register_module("c_proj", std::make_shared<nn::Linear>(n_embd, n_embd, config.bias));
    resid_dropout = register_module("resid_dropout", std::make_shared<nn::Dropout>(dropout));
  }

  Tensor forward(const Tensor& x) const {
    // batch size, sequence length, embedding dimensionality (n_embd)
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    // query, key, value for all heads in one product, then the heads moved next to the batch
    const std::vector<Tensor> qkv = split(c_attn->forward(x), n_embd, 2);      // 3 x (B, T, C)
    const Tensor q = qkv[0].view({B, T, n_head, C / n_head}).transpose(1, 2);  // (B, nh, T, hs)
    const Tensor k = qkv[1].view({B, T, n_head, C / n_head}).transpose(1, 2);  // (B, nh, T, hs)
    const Tensor v = qkv[2].view({B, T, n_head, C / n_head}).transpose(1, 2);  // (B, nh, T, hs)
    // causal self-attention, softmax(q kᵀ / √hs, keys after the query masked) v, in one fused
    // kernel: PyTorch 2's F.scaled_dot_product_attention(q, k, v, is_causal=True), which nanoGPT
    // calls its flash attention. The heads are read in place (views of c_attn's output).
    Tensor y = attention(q, k, v,
        {.is_causal = true, .dropout_p = dropout, .training = is_training()});  // (B, nh, T, hs)
    y = y.transpose(1, 2).contiguous().view({B, T, C});  // the heads side by side again
    // output projection
    return resid_dropout->forward(c_proj->forward(y));  // (B, T, C)
  }
  std::string type_name() const override { return "CausalSelfAttention"; }

  int64_t n_head, n_embd;
  double dropout;
  std::shared_ptr<nn::Linear> c_attn, c_proj;
  std::shared_ptr<nn::Dropout> resid_dropout;
};

class MLP : public nn::Module {
 public:
  explicit MLP(const GPTConfig& config) {
    c_fc = register_module(
        "c_fc", std::make_shared<nn::Linear>(config.n_embd, 4 * config.n_embd, config.bias));
    gelu = register_module("gelu", std::make_shared<nn::GELU>());  // the exact erf form
    c_proj = register_module(
        "c_proj", std::make_shared<nn::Linear>(4 * config.n_embd, config.n_embd, config.bias));
    dropout = register_module("dropout", std::make_shared<nn::Dropout>(config.dropout));
  }
  Tensor forward(Tensor x) const {
    x = c_fc->forward(x);    // (B, T, 4C)
    x = gelu->forward(x);    // (B, T, 4C)
    x = c_proj->forward(x);  // (B, T, C)
    return dropout->forward(x);
  }
  std::string type_name() const override { return "MLP"; }

  std::shared_ptr<nn::Linear> c_fc, c_proj;
  std::shared_ptr<nn::GELU> gelu;
  std::shared_ptr<nn::Dropout> dropout;
};

// A pre-norm block: each sublayer reads a normalised copy of the residual stream x and adds its
// output to it.
class Block : public nn::Module {
 public:
  explicit Block(const GPTConfig& config) {
    ln_1 = register_module("ln_1", layer_norm(config));
    attn = register_module("attn", std::make_shared<CausalSelfAttention>(config));
    ln_2 = register_module("ln_2", layer_norm(config));
    mlp = register_module("mlp", std::make_shared<MLP>(config));
  }
  Tensor forward(Tensor x) const {
    x = x + attn->forward(ln_1->forward(x));  // (B, T, C)
    x = x + mlp->forward(ln_2->forward(x));   // (B, T, C)
    return x;
  }
  std::string type_name() const override { return "Block"; }

  // model.py's LayerNorm(ndim, bias): "LayerNorm but with an optional bias" — nn::LayerNorm takes
  // PyTorch 2.1's bias argument.
  static std::shared_ptr<nn::LayerNorm> layer_norm(const GPTConfig& config) {
    return std::make_shared<nn::LayerNorm>(
        std::vector<int64_t>{config.n_embd}, 1e-5, /*elementwise_affine=*/true, config.bias);
  }

  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
};

class GPT : public nn::Module {
 public:
  explicit GPT(const GPTConfig& c) : config(c) {
    // self.transformer = nn.ModuleDict(dict(wte=..., wpe=..., drop=..., h=..., ln_f=...)): the
    // names of the state dict, "transformer.h.0.attn.c_attn.weight", are nanoGPT's, so that a
    // safetensors file of either model loads into the other.
    transformer = register_module("transformer", std::make_shared<nn::ModuleDict>());
    wte = transformer->insert("wte", std::make_shared<nn::Embedding>(c.vocab_size, c.n_embd));
    wpe = transformer->insert("wpe", std::make_shared<nn::Embedding>(c.block_size, c.n_embd));
    drop = transformer->insert("drop", std::make_shared<nn::Dropout>(c.dropout));
    h = transformer->insert("h", std::make_shared<nn::ModuleList>());
    for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<Block>(c));
    ln_f = transformer->insert("ln_f", Block::layer_norm(c));
    lm_head = register_module(
        "lm_head", std::make_shared<nn::Linear>(c.n_embd, c.vocab_size, /*bias=*/false));
    // weight tying: the output layer's weight is the token embedding — one (V, C) tensor, listed
    // once by parameters() (as "transformer.wte.weight") and saved under both names
    wte->weight = lm_head->weight;

    // init all weights: N(0, 0.02) for every Linear and Embedding weight, zero biases
    apply([](nn::Module& m) {
      if (auto* linear = dynamic_cast<nn::Linear*>(&m)) {
        nn::init::normal_(linear->weight, 0.0, 0.02);
        if (linear->bias.defined()) nn::init::zeros_(linear->bias);
      } else if (auto* embedding = dynamic_cast<nn::Embedding*>(&m)) {
        nn::init::normal_(embedding->weight, 0.0, 0.02);
      }
    });
    // apply special scaled init to the residual projections, per GPT-2 paper: the 2·n_layer
    // projections that add into the residual stream start smaller, so that the stream's variance
    // does not grow with the depth
    for (const auto& [name, p] : named_parameters())
      if (name.ends_with("c_proj.weight"))
        nn::init::normal_(p, 0.0, 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer)));
  }

  // The parameters, each once (the tied weight once). For the non-embedding count (default), the
  // position embeddings are subtracted; the token embeddings would be too, except that through
  // the tying they are the final layer's weights, so they are counted.
  int64_t get_num_params(bool non_embedding = true) const {
    int64_t n_params = num_parameters();
    if (non_embedding) n_params -= wpe->weight.numel();
    return n_params;
  }

  // idx (B, T) of token ids -> the logits, and with targets (B, T) the mean cross-entropy loss.
  struct Output {
    Tensor logits, loss;
  };
  Output forward(const Tensor& idx, const Tensor& targets = Tensor()) const {
    const int64_t t = idx.size(1);
    if (t > config.block_size)
      fail<ValueError>("GPT: cannot forward a sequence of length ", t, ", block size is only ",
          config.block_size);
    const Tensor pos = arange(0, static_cast<double>(t), 1, int64);  // (T)

    // forward the GPT model itself
    const Tensor tok_emb = wte->forward(idx);     // token embeddings (B, T, C)
    const Tensor pos_emb = wpe->forward(pos);     // position embeddings (T, C)
    Tensor x = drop->forward(tok_emb + pos_emb);  // (B, T, C)
    for (const auto& block : *h) x = std::static_pointer_cast<Block>(block)->forward(x);
    x = ln_f->forward(x);  // (B, T, C)

    if (targets.defined()) {
      // if we are given some desired targets also calculate the loss
      const Tensor logits = lm_head->forward(x);  // (B, T, V)
      const Tensor loss = cross_entropy(
          logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));  // (B·T, V), (B·T) -> ()
      return {logits, loss};
    }
    // inference-time mini-optimization: only forward the lm_head on the very last position
    return {lm_head->forward(x.narrow(1, t - 1, 1)), Tensor()};  // (B, 1, V)
  }

  // sample.py's model.generate: continue idx by max_new_tokens, feeding the predictions back in,
  // each from the last block_size tokens: logits / temperature, only the top_k kept, softmax, one
  // draw (models/lm.h's sample_token).
  std::vector<int64_t> generate(std::vector<int64_t> idx, int64_t max_new_tokens,
      double temperature, int64_t top_k, Generator& generator) {
    NoGradGuard no_grad;
    eval();
    const lm::Sampling sampling{temperature, std::min(top_k, config.vocab_size)};
    for (int64_t i = 0; i < max_new_tokens; ++i) {
      // if the sequence context is growing too long we must crop it at block_size
      const auto start = idx.size() > static_cast<std::size_t>(config.block_size)
                             ? idx.end() - config.block_size
                             : idx.begin();
      const std::vector<int64_t> idx_cond(start, idx.end());
      const Tensor logits = forward(tensor(idx_cond, {1, static_cast<int64_t>(idx_cond.size())}))
                                .logits.to(float64);  // (1, 1, V)
      idx.push_back(lm::sample_token(logits.to_vector<double>(), sampling, generator));
    }
    train();
    return idx;
  }
  std::string type_name() const override { return "GPT"; }

  GPTConfig config;
  std::shared_ptr<nn::ModuleDict> transformer;
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::ModuleList> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> lm_head;
};

// ==== the training: train.py =====================================================================

// 1234567 -> "1,234,567" (Python's f"{n:,}")
std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// What defines the run, saved in its checkpoint and read back on --resume (nanoGPT's
// checkpoint['model_args'] and checkpoint['config']): each entry once, for the save and the load.
void describe(training::Layout& file, Config& c, uint32_t& text_crc) {
  file.count("config.n_layer", c.n_layer, 1, kMaxLayers);
  file.count("config.n_head", c.n_head, 1, kMaxWidth);
  file.count("config.n_embd", c.n_embd, 1, kMaxWidth);
  file.count("config.block_size", c.block_size, 1, kMaxBlock);
  int64_t bias = c.bias ? 1 : 0;
  file.count("config.bias", bias, 0, 1);
  c.bias = bias == 1;
  file.real("config.dropout", c.dropout, 0.0);
  file.count("config.batch_size", c.batch_size, 1, training::kMaxBatchSize);
  file.count("config.gradient_accumulation_steps", c.gradient_accumulation_steps, 1,
      training::kMaxBatchSize);
  file.count("config.max_iters", c.max_iters, 1);
  file.real("config.learning_rate", c.learning_rate, 0.0);
  file.real("config.min_lr", c.min_lr, 0.0);
  file.count("config.warmup_iters", c.warmup_iters, 0);
  file.count("config.lr_decay_iters", c.lr_decay_iters, 1);
  file.real("config.weight_decay", c.weight_decay, 0.0);
  file.real("config.beta1", c.beta1, 0.0);
  file.real("config.beta2", c.beta2, 0.0);
  file.real("config.grad_clip", c.grad_clip, 0.0);
  // The evaluations draw their batches from the same stream as the training: they define the run.
  file.count("config.eval_interval", c.eval_interval, 1);
  file.count("config.eval_iters", c.eval_iters, 1, 1 << 20);
  file.integer("config.seed", c.seed);
  file.text("text.source", c.text);
  file.integer("text.crc32", text_crc);
  if (const std::string problem = config_problem(c); file.reading() && !problem.empty())
    throw CheckpointError("checkpoint " + file.path() + ": its run is refused: " + problem);
}

// The options ag::training's Run and Step read, from nanoGPT's.
void set_run_options(const Config& c, training::RunOptions& o) {
  o.steps = c.max_iters;
  // One step's global batch: gradient_accumulation_steps micro-batches of batch_size windows.
  o.batch_size = c.batch_size * c.gradient_accumulation_steps;
  o.lr = c.learning_rate;
  o.clip = c.grad_clip > 0 ? c.grad_clip : 1.0;  // (Step's clip is set below: none for 0)
  o.seed = c.seed;
  o.eval_every = c.eval_interval;
  o.schedule = "constant";  // (the schedule is nanoGPT's get_lr, optim::nanogpt_schedule)
  // Gradient accumulation: each micro-batch its own forward and backward, the gradients added in
  // their order (nanoGPT's loop over micro_step with loss / gradient_accumulation_steps).
  o.chunk_rows = c.gradient_accumulation_steps > 1 ? c.batch_size : 0;
}

int train(Config& c, training::RunOptions& o) {
  // ---- the data, the checkpoint to resume ------------------------------------------------------
  uint32_t text_crc = 0;
  auto settings = [&](training::Layout& file) { describe(file, c, text_crc); };
  const std::optional<Checkpoint> resumed = training::open_run(o, kProgram, settings);
  set_run_options(c, o);
  const uint32_t saved_crc = text_crc;
  Dataset dataset;
  try {
    dataset = prepare(c.text);
  } catch (const std::exception& e) {
    throw training::UsageError(e.what());
  }
  text_crc = dataset.crc;
  if (resumed && saved_crc != dataset.crc)
    throw CheckpointError("checkpoint " + o.resume + ": the text it was trained on (" +
                          (c.text.empty() ? std::string("the fortunes") : c.text) +
                          ") has changed since");
  for (const auto& [split, ids] :
      {std::pair{"train", &dataset.train}, std::pair{"val", &dataset.val}})
    if (static_cast<int64_t>(ids->size()) <= c.block_size)
      throw training::UsageError(std::string("the text is too short: its ") + split +
                                 " split has " + std::to_string(ids->size()) +
                                 " characters, and --block-size " + std::to_string(c.block_size) +
                                 " needs more");
  const int64_t vocab_size = static_cast<int64_t>(dataset.itos.size());
  std::printf("length of dataset in characters: %s\n", with_commas(dataset.characters).c_str());
  std::printf("vocab size: %lld\n", static_cast<long long>(vocab_size));
  std::printf("train has %s tokens\nval has %s tokens\n",
      with_commas(static_cast<int64_t>(dataset.train.size())).c_str(),
      with_commas(static_cast<int64_t>(dataset.val.size())).c_str());
  std::printf(
      "tokens per iteration will be: %s\n", with_commas(o.batch_size * c.block_size).c_str());
  training::RunOptions shown = o;  // (its chunks are our micro-batches: said below, in our words)
  shown.chunk_rows = 0;
  training::print_data_parallel(shown, "windows");
  if (c.gradient_accumulation_steps > 1)
    std::printf(
        "gradient accumulation: %lld micro-batches of %lld windows an iteration, each with "
        "its own forward and backward, their gradients added in order\n",
        static_cast<long long>(c.gradient_accumulation_steps),
        static_cast<long long>(c.batch_size));

  // ---- the model -------------------------------------------------------------------------------
  manual_seed(c.seed);  // the initial weights (and dropout's stream)
  GPT model({.block_size = c.block_size,
      .vocab_size = vocab_size,
      .n_layer = c.n_layer,
      .n_head = c.n_head,
      .n_embd = c.n_embd,
      .dropout = c.dropout,
      .bias = c.bias});
  // report number of parameters (nanoGPT's line, and the exact count)
  std::printf("number of parameters: %.2fM (%s)\n",
      static_cast<double>(model.get_num_params()) / 1e6,
      with_commas(model.get_num_params()).c_str());

  // ---- the optimizer: configure_optimizers -----------------------------------------------------
  // Any parameter that is 2-D is weight decayed, otherwise not: all weight tensors in matmuls and
  // embeddings decay, the biases and LayerNorms do not.
  std::vector<optim::ParamGroup> groups =
      optim::weight_decay_groups(model.parameters(), c.weight_decay);
  for (const auto& [group, what] :
      {std::pair{&groups[0], "decayed"}, std::pair{&groups[1], "non-decayed"}}) {
    int64_t numel = 0;
    for (const Tensor& p : group->params) numel += p.numel();
    std::printf("num %s parameter tensors: %zu, with %s parameters\n", what, group->params.size(),
        with_commas(numel).c_str());
  }
  optim::AdamW optimizer(groups, c.learning_rate, {c.beta1, c.beta2}, /*eps=*/1e-8);
  // get_lr: linear warm-up for warmup_iters, cosine decay to min_lr at lr_decay_iters, then min_lr
  optim::Scheduler scheduler(optimizer,
      optim::nanogpt_schedule(c.warmup_iters, c.lr_decay_iters, c.min_lr / c.learning_rate));

  // ---- the run: the checkpoint's state, restored on --resume -----------------------------------
  BatchStream batches(c.seed);
  double best_val_loss = 1e9;  // really big number
  training::Run run(o, model, optimizer, scheduler, settings, kProgram, kProgram);
  run.track([&](training::Layout& file) {
    file.integer("batches.state", batches.state());
    file.real("best_val_loss", best_val_loss);
  });
  run.start(resumed);  // weights, AdamW's moments, the schedule, the generators: exactly
  training::StepOptions step_options = training::StepOptions::of(o, kProgram);
  if (c.grad_clip == 0) step_options.clip = std::numeric_limits<double>::infinity();  // no clip
  training::Step step(model, optimizer, scheduler, o.batch_size, step_options);
  training::LogFile loss_log;  // --loss-log: "step,loss" rows, the loss as a hexadecimal float
  if (dist::rank() == 0 && !o.loss_log.empty())
    loss_log = training::LogFile(o.loss_log, "--loss-log", "step,loss", run.first_step());

  // estimate_loss: the mean loss of eval_iters random batches of each split, in eval mode (no
  // dropout) and without a graph. Every rank draws the batches (the stream stays the same on every
  // rank); rank 0 alone computes them.
  auto estimate_loss = [&]() {
    std::map<std::string, double> out;
    NoGradGuard no_grad;
    model.eval();
    for (const auto& [split, ids] :
        {std::pair{"train", &dataset.train}, std::pair{"val", &dataset.val}}) {
      double losses = 0;
      for (int64_t k = 0; k < c.eval_iters; ++k) {
        const Batch batch = get_batch(*ids, c.batch_size, c.block_size, batches);
        if (dist::rank() == 0) losses += model.forward(batch.x, batch.y).loss.item();
      }
      out[split] = losses / static_cast<double>(c.eval_iters);
    }
    model.train();
    return out;
  };
  auto evaluate = [&](int64_t iter_num) {
    const std::map<std::string, double> losses = estimate_loss();
    std::printf("step %lld: train loss %.4f, val loss %.4f\n", static_cast<long long>(iter_num),
        losses.at("train"), losses.at("val"));
    best_val_loss = std::min(best_val_loss, losses.at("val"));
    std::fflush(stdout);
  };

  // ---- the training loop -----------------------------------------------------------------------
  // ag's step t (1, 2, …) is nanoGPT's iter_num t − 1: the update that makes t updates.
  // Each iteration's wall-clock and CPU time (the process's, all its threads), for the summary.
  std::vector<double> wall_ms, cpu_ms;
  training::StepProfiler profiler(o, run.first_step(), run.last_step());  // --profile N
  if (run.first_step() == 1) evaluate(0);
  for (int64_t t = run.first_step(); t <= run.last_step(); ++t) {
    profiler.step_begins(t);
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t cpu0 = std::clock();
    // The step's global batch: gradient_accumulation_steps micro-batches, one after another.
    const Batch batch = get_batch(dataset.train, o.batch_size, c.block_size, batches);
    // The mean loss of rows [first, last) of the batch and their weight (their number): Step
    // takes this rank's rows, micro-batch by micro-batch with accumulation, averages the ranks'
    // gradients under mpirun, clips at grad_clip, steps AdamW and the schedule.
    auto loss_of = [&](int64_t first, int64_t last) {
      const Tensor x = batch.x.narrow(0, first, last - first);  // (rows, T)
      const Tensor y = batch.y.narrow(0, first, last - first);  // (rows, T)
      return std::pair{model.forward(x, y).loss, static_cast<double>(last - first)};
    };
    const training::StepResult result = step.take(t, static_cast<double>(o.batch_size), loss_of);
    profiler.step_ends(t);
    if (result.diverged) return 1;
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    wall_ms.push_back(dt * 1000);
    cpu_ms.push_back(1000.0 * static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC);
    if (loss_log.is_open()) {
      char row[64];
      std::snprintf(row, sizeof row, "%lld,%a", static_cast<long long>(t), result.loss);
      loss_log.row(row);
    }
    if ((t - 1) % c.log_interval == 0)
      std::printf("iter %lld: loss %.4f, time %.2fms\n", static_cast<long long>(t - 1), result.loss,
          dt * 1000);
    if (t % c.eval_interval == 0 || t == o.steps) evaluate(t);
    const bool stop = run.stop_requested();  // Ctrl-C, on every rank after the same step
    if (run.save_due(t, stop)) run.save(t);
    if (stop) return run.interrupted_after(t);
  }
  if (run.stopped_early()) return 0;
  std::printf("best val loss %.4f\n", best_val_loss);
  // Not nanoGPT's: the median time of an iteration, the first 10 of this invocation left out (on a
  // machine shared with other work, the CPU time shows the work and the wall-clock time also the
  // waiting).
  if (wall_ms.size() > 10) {
    auto median_from_10 = [](std::vector<double> v) {  // Python's statistics.median
      v.erase(v.begin(), v.begin() + 10);
      std::sort(v.begin(), v.end());
      const std::size_t n = v.size();
      return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    };
    std::printf(
        "time per iteration: median %.2fms, CPU time median %.2fms (iterations from 10 on)\n",
        median_from_10(wall_ms), median_from_10(cpu_ms));
  }

  // ---- sample.py: a continuation of "\n" ------------------------------------------------------
  if (c.sample > 0 && dist::rank() == 0) {
    Generator generator(c.seed);
    const auto newline = dataset.stoi.find(U'\n');
    const std::vector<int64_t> start = {newline == dataset.stoi.end() ? 0 : newline->second};
    const std::vector<int64_t> ids =
        model.generate(start, c.sample, c.temperature, c.top_k, generator);
    std::printf("---------------\n%s\n---------------\n", decode(dataset, ids).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const auto mpi = training::start(kProgram, argc, argv);  // Ctrl-C, mpirun
  Config c;
  training::RunOptions o;
  CLI::App app{"ag-nanogpt: nanoGPT's GPT and its training recipe (model.py, train.py) in C++"};
  // train.py's configuration, under its names (n_layer -> --n-layer)
  app.add_option("--text", c.text, "the UTF-8 text to train on (default: Debian's fortunes)")
      ->type_name("FILE");
  training::add_whole_number(
      app, "--n-layer", c.n_layer, "Transformer blocks", int64_t{1}, kMaxLayers);
  training::add_whole_number(app, "--n-head", c.n_head, "attention heads", int64_t{1}, kMaxWidth);
  training::add_whole_number(
      app, "--n-embd", c.n_embd, "the embedding width", int64_t{1}, kMaxWidth);
  training::add_whole_number(
      app, "--block-size", c.block_size, "the context, in characters", int64_t{1}, kMaxBlock);
  app.add_option("--dropout", c.dropout, "dropout probability")->capture_default_str();
  app.add_flag("--bias", c.bias, "biases in the Linears and LayerNorms, like GPT-2");
  training::add_whole_number(app, "--batch-size", c.batch_size, "windows per micro-batch",
      int64_t{1}, training::kMaxBatchSize);
  training::add_whole_number(app, "--gradient-accumulation-steps", c.gradient_accumulation_steps,
      "micro-batches per iteration, their gradients added", int64_t{1}, training::kMaxBatchSize);
  training::add_whole_number(
      app, "--max-iters", c.max_iters, "training iterations", int64_t{1}, int64_t{1} << 40);
  app.add_option("--learning-rate", c.learning_rate, "the peak learning rate")
      ->capture_default_str();
  app.add_option("--min-lr", c.min_lr, "the learning rate at --lr-decay-iters and after")
      ->capture_default_str();
  training::add_whole_number(app, "--warmup-iters", c.warmup_iters, "iterations of linear warm-up",
      int64_t{0}, int64_t{1} << 40);
  training::add_whole_number(app, "--lr-decay-iters", c.lr_decay_iters,
      "the iteration where the cosine decay reaches --min-lr", int64_t{1}, int64_t{1} << 40);
  app.add_option("--weight-decay", c.weight_decay, "AdamW's weight decay of the >= 2-D parameters")
      ->capture_default_str();
  app.add_option("--beta1", c.beta1, "AdamW's beta1")->capture_default_str();
  app.add_option("--beta2", c.beta2, "AdamW's beta2")->capture_default_str();
  app.add_option("--grad-clip", c.grad_clip, "clip the gradients' global norm to this (0: none)")
      ->capture_default_str();
  training::add_whole_number(app, "--eval-interval", c.eval_interval,
      "evaluate every this many iterations", int64_t{1}, int64_t{1} << 40);
  training::add_whole_number(app, "--eval-iters", c.eval_iters,
      "batches of each split an evaluation averages", int64_t{1}, int64_t{1} << 20);
  training::add_whole_number(app, "--log-interval", c.log_interval,
      "print an iteration's loss and time every this many iterations", int64_t{1},
      int64_t{1} << 40);
  training::add_whole_number(
      app, "--seed", c.seed, "seeds the initial weights, dropout and the batches");
  training::add_whole_number(app, "--sample", c.sample,
      "after training, sample this many characters (sample.py)", int64_t{0}, int64_t{1} << 20);
  app.add_option("--temperature", c.temperature, "the sampling temperature")->capture_default_str();
  training::add_whole_number(
      app, "--top-k", c.top_k, "sample among the k likeliest characters", int64_t{1}, kMaxWidth);
  // how this invocation runs, saves and reports: --threads, --checkpoint, --resume, …
  training::add_invocation_options(app, o);
  return training::run_main(kProgram, app, argc, argv, [&] {
    if (const std::string problem = config_problem(c); !problem.empty())
      throw training::UsageError(problem);
    set_run_options(c, o);
    if (const int world = dist::world_size();
        c.gradient_accumulation_steps > 1 && c.gradient_accumulation_steps % world != 0)
      throw training::UsageError(  // train.py: assert gradient_accumulation_steps % world == 0
          "--gradient-accumulation-steps " + std::to_string(c.gradient_accumulation_steps) +
          " must be a multiple of the " + std::to_string(world) + " ranks");
    if (const std::string problem = training::run_options_problem(o); !problem.empty())
      throw training::UsageError(problem);
    set_num_threads(o.threads);
    return train(c, o);
  });
}

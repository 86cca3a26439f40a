// The decoder-only language model (nn/language_model.h) as ag-train --task lm, ag-generate and the
// benchmarks use it: tokenizing a text for it, the builder, the loss, one training step, the
// evaluation on validation ids (loss per token, perplexity, bits per character), and sampling with
// temperature and top-k, with or without the key/value cache. nanoGPT keeps the same pieces in
// train.py (get_batch, estimate_loss) and model.py (GPT.generate).
//
// Dimension names: B batch, T block_size (context), V vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autograd/generator.h"
#include "data/text.h"
#include "nn/language_model.h"
#include "optim/optimizer.h"

namespace ag::lm {

// ---- tokens -------------------------------------------------------------------------------------

// char: one token per code point (data::tokenize_chars), each covering one character.
// word: d2l's preprocess_nmt on the whole text (lower case, a space before , . ! ?), then each line
//   split on ' ' (data::tokenize_words) with the empty strings of repeated spaces dropped, and a
//   "\n" token after every line that ends in a line break. Characters covered, counted in the
//   preprocessed text: a word covers its code points plus one for the space (or line break) after
//   it; a "\n" token covers none (its line's last word counted the break). For a preprocessed text
//   with single spaces that ends in a line break, the sum is exactly its length in code points.
enum class Tokenizer { chars, words };
std::string tokenizer_name(Tokenizer tokenizer);  // "char" | "word"
// "char" or "word"; ValueError naming `what` (an option, a file) otherwise.
Tokenizer parse_tokenizer(const std::string& name, const std::string& what = "tokenizer");

struct TokenizedText {
  std::vector<std::string> tokens;
  std::vector<int64_t> characters;  // per token, the characters it covers (above)
};
TokenizedText tokenize(std::string_view text, Tokenizer tokenizer);
// Tokens back to text: concatenated (char); joined by spaces, with no space around "\n" (word).
std::string detokenize(const std::vector<std::string>& tokens, Tokenizer tokenizer);

// The text's first train_fraction of code points and the rest, split on a code-point boundary
// (nanoGPT's data[:int(n*0.9)] and data[int(n*0.9):] on characters). ValueError for invalid UTF-8.
std::pair<std::string, std::string> split_text(std::string_view text, double train_fraction = 0.9);

// ---- the model ----------------------------------------------------------------------------------

// The char-small: D 128, 4 heads, 4 layers, FFN 512, block 64, dropout 0.1, post-norm
// d2l blocks, sinusoidal positions, untied.
nn::LanguageModelConfig char_small_config(int64_t vocab_size);

// The model with every Linear weight re-initialised by Xavier-uniform, as d2l's training loops do
// (models/seq2seq.h's make_transformer). Uses the default generator.
std::shared_ptr<nn::LanguageModel> make_language_model(const nn::LanguageModelConfig& config);

// The parameters make_language_model(config) builds, exactly, and the numbers of its state dict
// (those and the sinusoid table, block_size × D, of sinusoidal positions).
uint64_t parameter_count(const nn::LanguageModelConfig& config);
uint64_t state_dict_numbers(const nn::LanguageModelConfig& config);

// Every size in 1 .. 2^20 (vocabulary, width, FFN width, heads, layers, block_size), heads
// dividing the width, key/value heads (0 or a divisor of the heads), dropout in [0, 1), RMSNorm
// only with pre-norm blocks, for RoPE an even head width and a base above 1; ValueError naming the
// setting as its option ("--num-hiddens" when options is true) or its entry ("config.num_hiddens").
void check_config(const nn::LanguageModelConfig& config, bool options);

// ---- training -----------------------------------------------------------------------------------

// The mean cross-entropy per token of next-token prediction: inputs and labels (B, T) of ids
// (labels = inputs shifted by one, data::sample_lm_batch) -> a scalar ().
Tensor lm_loss(nn::LanguageModel& model, const Tensor& inputs, const Tensor& labels);

// One step: forward, the loss, backward, clipping of the global gradient norm at `clip`, the
// optimizer's update. Returns the loss before the update. (ag-train writes these lines itself, to
// stop on a NaN before the update.)
double train_step(nn::LanguageModel& model, optim::Optimizer& optimizer, const Tensor& inputs,
    const Tensor& labels, double clip);

struct Evaluation {
  double loss = 0;                // mean cross-entropy per predicted token (nats)
  double perplexity = 0;          // exp(loss)
  double bits_per_character = 0;  // total nats / ln 2 / characters covered by the labels
  int64_t windows = 0, tokens = 0, characters = 0;
};
// Deterministic validation: consecutive non-overlapping windows of block_size + 1 ids from the
// start of `ids` (window w: ids[w·T … w·T + T], inputs its first T, labels its last T), at most
// max_windows of them, run in batches of batch_size, in eval mode without a graph (the model's
// mode is restored). `characters` (one per id, tokenize()'s) counts the characters the label tokens
// cover; empty means one per token. ValueError for fewer than block_size + 1 ids, max_windows < 1,
// or characters of another length.
Evaluation evaluate(nn::LanguageModel& model, const std::vector<int64_t>& ids,
    const std::vector<int64_t>& characters, int64_t max_windows, int64_t batch_size = 32);

// Length extrapolation: the mean cross-entropy of next-token prediction at each position of
// `context`-token windows — consecutive non-overlapping windows of context + 1 ids from the start
// of `ids` (window w: ids[w·C … w·C + C]), at most max_windows of them, in batches of batch_size,
// in eval mode without a graph. Entry t (of context) is the loss of predicting each window's id
// t + 1 from its ids 0 … t, averaged over the windows; their mean is the windows' loss per token.
// context may exceed block_size once the model allows it (LanguageModel::extend_context).
// ValueError for fewer than context + 1 ids, context or max_windows < 1.
std::vector<double> loss_by_position(nn::LanguageModel& model, const std::vector<int64_t>& ids,
    int64_t context, int64_t max_windows, int64_t batch_size = 32);

// ---- sampling -----------------------------------------------------------------------------------

struct Sampling {
  double temperature = 1.0;  // 0: greedy (the first largest logit); else softmax(logits / T)
  int64_t top_k = 0;         // 0: every token; else only tokens whose logit is >= the k-th largest
};
// Throws ValueError for a temperature < 0 or not finite, top_k < 0 or above `vocab_size`.
void check_sampling(const Sampling& sampling, int64_t vocab_size);

// One token from one row of logits (V values), as nanoGPT's generate: logits / temperature, the
// logits below the k-th largest dropped, softmax (in double), then one draw u ~ U[0, 1) from
// `generator` (one block): the first token whose cumulative probability exceeds u.
int64_t sample_token(
    const std::vector<double>& logits, const Sampling& sampling, Generator& generator);

// Continues `prompt` by max_new tokens, one at a time in eval mode without a graph. The context is
// cropped to its last block_size tokens, as nanoGPT does (to model.max_context() tokens, if
// LanguageModel::extend_context changed it).
//   use_cache = true: the key/value cache; a step computes only the new token's query, key and
//     value. Once the context is full:
//     - absolute positions (sinusoidal, learned): cropping moves every token to a new position, so
//       no cached key stays valid: that step rebuilds the cache from the cropped window (a full
//       forward of block_size tokens), as fast as recomputing;
//     - relative positions (rope, alibi, none): the cache slides (KVCache::drop_oldest): the new
//       token attends to the block_size − 1 cached positions before it and itself, in every block,
//       with the keys and values computed when those positions were new (Mistral's rolling
//       buffer). Nothing is recomputed, whatever the length.
//   use_cache = false: every step runs the full (cropped) context again.
// Both give the same tokens while the context fits in block_size (the logits agree to rounding;
// for absolute positions bit for bit once the context is full). Past it, with relative positions,
// they differ: a sliding cache's oldest keys were computed while their own earlier context was
// still in the window, a recomputed window starts afresh (with one block, the two agree).
// Returns the max_new new tokens; `step_logits` (if given) receives each step's logits row (V).
// ValueError for an empty prompt, max_new < 0, or a bad Sampling.
std::vector<int64_t> generate(nn::LanguageModel& model, const std::vector<int64_t>& prompt,
    int64_t max_new, const Sampling& sampling, Generator& generator, bool use_cache = true,
    std::vector<std::vector<double>>* step_logits = nullptr);

}  // namespace ag::lm

// d2l's machine translation with the Transformer ("Machine Translation and the Dataset",
// "Sequence to Sequence Learning", "Beam Search"): sentence pairs tokenized as d2l's
// preprocess_nmt + tokenize_nmt, a vocabulary per language, batches of shuffled pairs, the
// held-out evaluation (loss, BLEU of greedy and beam decoding) and the preparation of a sentence
// a user types — what ag-train --task translate, ag-predict and the tests share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/text.h"
#include "data/text_corpus.h"
#include "models/seq2seq.h"
#include "models/seq2seq_file.h"

namespace ag::seq2seq {

// Word tokens of each pair, as d2l's tokenize_nmt(preprocess_nmt(text)).
struct TokenizedPairs {
  std::vector<std::vector<std::string>> source, target;
  int64_t size() const { return static_cast<int64_t>(source.size()); }
};
TokenizedPairs tokenize_pairs(const std::vector<data::SentencePair>& pairs);

// The held-out pairs are a fixed slice, never trained on: every (N / eval_size)-th pair (the last
// of each stride), so that a file sorted by length, as d2l's fra.txt is, gives short and long
// sentences alike. ValueError for eval_size < 1 or above half of the N pairs.
struct TranslationSplit {
  TokenizedPairs train, held_out;
};
TranslationSplit split_pairs(const TokenizedPairs& pairs, int64_t eval_size);

// d2l's load_data_nmt: Vocab(tokens, min_freq, ["<pad>", "<bos>", "<eos>"]) for each language,
// counted over the training pairs (so held-out words it never saw become <unk>).
TranslationVocabs make_translation_vocabs(
    const TokenizedPairs& train, int64_t min_freq, int64_t num_steps);
// d2l's batch of the pairs `indices` (data::make_translation_batch).
data::Batch translation_batch(const TokenizedPairs& pairs, const std::vector<int64_t>& indices,
    const TranslationVocabs& vocabs);

// The training pairs in the order d2l's DataLoader(shuffle=True) reads them: each epoch a fresh
// permutation, batches taken in turn; a batch that reaches the end of an epoch continues with the
// next one, so every batch is full. The permutation of epoch e comes from its own generator
// (seed, e), so the stream's position is (epoch, position) — what checkpoints save.
class PairStream {
 public:
  PairStream(int64_t size, uint64_t seed);
  std::vector<int64_t> next(int64_t batch_size);
  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }
  // ValueError for a position outside the epoch.
  void set_position(int64_t epoch, int64_t position);

 private:
  void shuffle();
  int64_t size_;
  uint64_t seed_;
  int64_t epoch_ = 0, position_ = 0;
  std::vector<int64_t> order_;
};

struct TranslationEvaluation {
  double loss = 0;         // masked cross-entropy per valid target token, teacher forcing
  double bleu_greedy = 0;  // mean over the pairs of bleu(prediction, reference, bleu_k)
  double bleu_beam = 0;    // the same for beam search (0 when beam_size is 0)
  std::vector<std::vector<std::string>> greedy, beam;  // predicted tokens, one per pair
};
// In eval mode without a graph (the module's mode is restored). Decoding stops after num_steps
// tokens, as d2l's predict_seq2seq. The references are the whole target sentences (not truncated
// to num_steps); BLEU averages the sentences' scores (each sentence weighs the same).
TranslationEvaluation evaluate_translation(nn::EncoderDecoder& model,
    const TokenizedPairs& held_out, const TranslationVocabs& vocabs, int64_t beam_size,
    int64_t bleu_k = 2, double alpha = 0.75, int64_t batch_size = 256);

// A sentence a user types, as d2l's predict_seq2seq reads it, after preprocess_nmt: its word
// tokens (the words the vocabulary lacks listed in `unknown`, mapped to <unk>), their ids with
// <eos>, truncated or padded to num_steps (`truncated`: words were cut), and its valid length.
struct SourceSentence {
  std::vector<std::string> tokens;
  std::vector<std::string> unknown;
  bool truncated = false;
  Tensor ids;        // (1, num_steps)
  Tensor valid_len;  // (1,)
};
// ValueError for a sentence without a word (empty, or only spaces).
SourceSentence prepare_source(const std::string& sentence, const TranslationVocabs& vocabs);

// The encoder–decoder attention of a translation, for pictures: one forward of the decoder with
// <bos> and the predicted tokens (T rows; the decoder is causal, so these are the weights that
// step-by-step decoding had), over the source's valid steps (Ts columns: its words, <eos>).
// Per layer (H, T, Ts). In eval mode without a graph.
std::vector<Tensor> translation_cross_attention(nn::EncoderDecoder& model,
    const SourceSentence& source, const std::vector<int64_t>& prediction, int64_t bos);

}  // namespace ag::seq2seq

#include "models/seq2seq_translation.h"

#include <algorithm>
#include <numeric>

#include "models/seq2seq_bleu.h"

namespace ag::seq2seq {

TokenizedPairs tokenize_pairs(const std::vector<data::SentencePair>& pairs) {
  TokenizedPairs out;
  out.source.reserve(pairs.size());
  out.target.reserve(pairs.size());
  for (const data::SentencePair& p : pairs) {
    out.source.push_back(data::tokenize_words(data::preprocess_nmt(p.source)));
    out.target.push_back(data::tokenize_words(data::preprocess_nmt(p.target)));
  }
  return out;
}

TranslationSplit split_pairs(const TokenizedPairs& pairs, int64_t eval_size) {
  const int64_t N = pairs.size();
  if (eval_size < 1 || eval_size > N / 2)
    fail<ValueError>("split_pairs: ", eval_size, " held-out pairs of ", N,
        " (at least 1, at most half of them, ", N / 2, ", so that training has pairs left)");
  const int64_t stride = N / eval_size;
  TranslationSplit split;
  for (int64_t i = 0; i < N; ++i) {
    // Pairs stride − 1, 2·stride − 1, …: eval_size of them; the rest train.
    const bool held = i % stride == stride - 1 && i / stride < eval_size;
    TokenizedPairs& to = held ? split.held_out : split.train;
    to.source.push_back(pairs.source[static_cast<std::size_t>(i)]);
    to.target.push_back(pairs.target[static_cast<std::size_t>(i)]);
  }
  return split;
}

TranslationVocabs make_translation_vocabs(
    const TokenizedPairs& train, int64_t min_freq, int64_t num_steps) {
  const std::vector<std::string> reserved = {"<pad>", "<bos>", "<eos>"};
  // Every token of every line counted in order of first appearance, as d2l's count_corpus.
  auto count = [](const std::vector<std::vector<std::string>>& lines) {
    data::TokenCounter counter;
    for (const auto& line : lines)
      for (const std::string& token : line) counter.add(token);
    return counter;
  };
  return {data::Vocab(count(train.source), min_freq, reserved),
      data::Vocab(count(train.target), min_freq, reserved), num_steps};
}

data::Batch translation_batch(const TokenizedPairs& pairs, const std::vector<int64_t>& indices,
    const TranslationVocabs& vocabs) {
  std::vector<std::vector<std::string>> source, target;
  for (int64_t i : indices) {
    source.push_back(pairs.source[static_cast<std::size_t>(i)]);
    target.push_back(pairs.target[static_cast<std::size_t>(i)]);
  }
  return data::make_translation_batch(
      source, target, vocabs.source, vocabs.target, vocabs.num_steps);
}

// ---- the training stream ------------------------------------------------------------------------

PairStream::PairStream(int64_t size, uint64_t seed) : size_(size), seed_(seed) {
  if (size < 1) fail<ValueError>("PairStream: no training pairs");
  shuffle();
}

void PairStream::shuffle() {
  // Fisher–Yates with the epoch's own generator: (seed, epoch) -> the same permutation always.
  Generator g(seed_ + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(epoch_));
  order_.resize(static_cast<std::size_t>(size_));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  for (int64_t i = size_ - 1; i > 0; --i)
    std::swap(
        order_[static_cast<std::size_t>(i)], order_[static_cast<std::size_t>(g.randint(0, i + 1))]);
}

std::vector<int64_t> PairStream::next(int64_t batch_size) {
  std::vector<int64_t> indices;
  while (static_cast<int64_t>(indices.size()) < batch_size) {
    if (position_ == size_) {
      ++epoch_;
      position_ = 0;
      shuffle();
    }
    indices.push_back(order_[static_cast<std::size_t>(position_++)]);
  }
  return indices;
}

void PairStream::set_position(int64_t epoch, int64_t position) {
  if (epoch < 0 || position < 0 || position > size_)
    fail<ValueError>("PairStream: position ", position, " of epoch ", epoch, " (an epoch has ",
        size_, " pairs)");
  epoch_ = epoch;
  position_ = position;
  shuffle();
}

// ---- evaluation ---------------------------------------------------------------------------------

TranslationEvaluation evaluate_translation(nn::EncoderDecoder& model,
    const TokenizedPairs& held_out, const TranslationVocabs& vocabs, int64_t beam_size,
    int64_t bleu_k, double alpha, int64_t batch_size) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const int64_t bos = vocabs.target.id("<bos>"), eos = vocabs.target.id("<eos>");
  TranslationEvaluation result;
  double loss_sum = 0, tokens = 0;
  for (int64_t start = 0; start < held_out.size(); start += batch_size) {
    std::vector<int64_t> indices(
        static_cast<std::size_t>(std::min(batch_size, held_out.size() - start)));
    std::iota(indices.begin(), indices.end(), start);
    const data::Batch batch = translation_batch(held_out, indices, vocabs);
    const double valid = sum(batch.label_valid_lens).item();
    loss_sum += sequence_loss(model, batch).item() * valid;  // the mean per valid token, × tokens
    tokens += valid;
    for (const auto& ids :
        greedy_decode(model, batch.source, batch.source_valid_lens, vocabs.num_steps, bos, eos))
      result.greedy.push_back(vocabs.target.tokens(ids));
    if (beam_size > 0) {
      BeamOptions options;
      options.beam_size = beam_size;
      options.alpha = alpha;
      options.max_steps = vocabs.num_steps;
      options.bos = bos;
      options.eos = eos;
      for (const BeamHypothesis& h :
          beam_decode(model, batch.source, batch.source_valid_lens, options))
        result.beam.push_back(vocabs.target.tokens(h.tokens));
    }
  }
  model.train(was_training);
  const auto n = static_cast<std::size_t>(held_out.size());
  result.loss = loss_sum / tokens;
  for (std::size_t i = 0; i < n; ++i) {
    result.bleu_greedy += bleu(result.greedy[i], held_out.target[i], bleu_k) / double(n);
    if (beam_size > 0)
      result.bleu_beam += bleu(result.beam[i], held_out.target[i], bleu_k) / double(n);
  }
  return result;
}

// ---- a sentence to translate --------------------------------------------------------------------

SourceSentence prepare_source(const std::string& sentence, const TranslationVocabs& vocabs) {
  SourceSentence s;
  s.tokens = data::tokenize_words(data::preprocess_nmt(sentence));
  if (std::all_of(s.tokens.begin(), s.tokens.end(), [](const auto& t) { return t.empty(); }))
    fail<ValueError>("the sentence \"", sentence, "\" has no word to translate");
  for (const std::string& token : s.tokens)
    if (!vocabs.source.contains(token) &&
        std::find(s.unknown.begin(), s.unknown.end(), token) == s.unknown.end())
      s.unknown.push_back(token);
  std::vector<int64_t> ids = vocabs.source.ids(s.tokens);
  ids.push_back(vocabs.source.id("<eos>"));
  s.truncated = static_cast<int64_t>(ids.size()) > vocabs.num_steps;
  const int64_t pad = vocabs.source.id("<pad>");
  ids = data::truncate_pad(std::move(ids), vocabs.num_steps, pad);
  const auto valid = std::count_if(ids.begin(), ids.end(), [&](int64_t id) { return id != pad; });
  s.ids = tensor(std::vector<float>(ids.begin(), ids.end()), {1, vocabs.num_steps});
  s.valid_len = tensor(std::vector<float>{static_cast<float>(valid)}, {1});
  return s;
}

std::vector<Tensor> translation_cross_attention(nn::EncoderDecoder& model,
    const SourceSentence& source, const std::vector<int64_t>& prediction, int64_t bos) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  std::vector<float> decoder_input{static_cast<float>(bos)};
  for (int64_t id : prediction) decoder_input.push_back(static_cast<float>(id));
  const int64_t T = static_cast<int64_t>(decoder_input.size());
  const int64_t Ts = static_cast<int64_t>(source.valid_len.item());
  model.forward(source.ids, tensor(decoder_input, {1, T}), source.valid_len);  // (1, T, V)
  std::vector<Tensor> per_layer;
  for (const Tensor& w : model.decoder->cross_attention_weights())      // (1, H, T, num_steps)
    per_layer.push_back(w.select(0, 0).narrow(2, 0, Ts).contiguous());  // (H, T, Ts)
  model.train(was_training);
  return per_layer;
}

}  // namespace ag::seq2seq

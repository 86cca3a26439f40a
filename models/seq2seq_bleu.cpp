#include "models/seq2seq_bleu.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "autograd/error.h"

namespace ag::seq2seq {

std::vector<std::string> split_on_spaces(std::string_view text) {
  std::vector<std::string> tokens;
  std::size_t start = 0;
  for (std::size_t space = text.find(' '); space != std::string_view::npos;
       space = text.find(' ', start)) {
    tokens.emplace_back(text.substr(start, space - start));
    start = space + 1;
  }
  tokens.emplace_back(text.substr(start));
  return tokens;
}

double bleu(const std::vector<std::string>& pred_tokens,
    const std::vector<std::string>& label_tokens, int64_t k) {
  if (k < 1) fail<ValueError>("bleu: k = ", k, " (the longest n-gram must be at least 1)");
  const int64_t len_pred = static_cast<int64_t>(pred_tokens.size());
  const int64_t len_label = static_cast<int64_t>(label_tokens.size());
  if (len_pred == 0) return 0.0;  // see seq2seq_bleu.h: d2l would divide by zero
  // d2l: score = math.exp(min(0, 1 - len_label / len_pred))
  double score = std::exp(std::min(0.0, 1.0 - static_cast<double>(len_label) / len_pred));
  using NGram = std::vector<std::string>;
  auto ngram = [](const std::vector<std::string>& tokens, int64_t start, int64_t n) {
    return NGram(tokens.begin() + start, tokens.begin() + start + n);
  };
  for (int64_t n = 1; n <= std::min(k, len_pred); ++n) {
    // The label's n-grams with their counts; each prediction n-gram found uses one up (clipping).
    std::map<NGram, int64_t> label_subs;
    for (int64_t i = 0; i + n <= len_label; ++i) ++label_subs[ngram(label_tokens, i, n)];
    int64_t num_matches = 0;
    for (int64_t i = 0; i + n <= len_pred; ++i) {
      auto found = label_subs.find(ngram(pred_tokens, i, n));
      if (found != label_subs.end() && found->second > 0) {
        ++num_matches;
        --found->second;
      }
    }
    // d2l: score *= math.pow(num_matches / (len_pred - n + 1), math.pow(0.5, n))
    score *= std::pow(static_cast<double>(num_matches) / static_cast<double>(len_pred - n + 1),
        std::pow(0.5, static_cast<double>(n)));
  }
  return score;
}

double bleu(std::string_view pred_seq, std::string_view label_seq, int64_t k) {
  return bleu(split_on_spaces(pred_seq), split_on_spaces(label_seq), k);
}

}  // namespace ag::seq2seq
